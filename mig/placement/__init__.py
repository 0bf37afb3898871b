"""The placement engine: which node, GPU, MIG profile and exact placement each requested device gets.

Pure and deterministic (no I/O). The scheduler keeps a `PlacementIndex` between requests, or calls
`plan_pod` once. See `plan` for the ranking order and `occupancy` for the fragmentation score.
"""

from mig.placement.index import PlacementIndex, plan_pod
from mig.placement.occupancy import ProfileSet, free_slices, profile_set
from mig.placement.plan import DevicePlacement, Plan
from mig.placement.preference import candidate_order, entry_matches, parse_preference, unknown_entries
from mig.placement.reasons import Reason, Refusal, gpu_reason
from mig.placement.request import (
    ContainerRequest,
    GpuState,
    Memory,
    Percent,
    PodRequest,
    PublishedProfile,
    RequestError,
    annotation_problem,
    container_request,
    devices_problem,
    memory_on,
)

__all__ = [
    "ContainerRequest",
    "DevicePlacement",
    "GpuState",
    "Memory",
    "Percent",
    "PlacementIndex",
    "Plan",
    "PodRequest",
    "ProfileSet",
    "PublishedProfile",
    "Reason",
    "Refusal",
    "RequestError",
    "annotation_problem",
    "candidate_order",
    "container_request",
    "devices_problem",
    "entry_matches",
    "free_slices",
    "gpu_reason",
    "memory_on",
    "parse_preference",
    "plan_pod",
    "profile_set",
    "unknown_entries",
]
