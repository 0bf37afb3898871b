"""The outcome of planning a pod, and the ranking that decides between candidates.

Order of preference for every requested device (first difference wins; documented for users):

1. profile rank: preferred profiles first (`nvidia.com/mig-profile-preference`), then the smallest
   covering profile. A larger profile is used only when no eligible GPU in the fleet (or, for the
   rest of a pod's devices, on the chosen node) has a free placement of a smaller one.
2. policy keys, by `hami.io/node-scheduler-policy` and `hami.io/gpu-scheduler-policy`:
   - binpack/binpack (default): fragmentation loss, then fuller node, then the fleet's fixed order
     (node name, then GPU index on the node): the first GPUs of a node fill first, the rest stay whole;
   - binpack/spread: fuller node, then emptier GPU, then fragmentation loss, then lower start;
   - spread/binpack: emptier node, then fragmentation loss, then fuller GPU, then lower start;
   - spread/spread: emptier node, then emptier GPU, then fragmentation loss, then lower start.
3. ties: node name, then GPU index on its node, then GPU UUID. On one GPU the placement is the one
   of least loss, then lower start (`occupancy.ProfileSet.best_at_risk`).

Why a fixed GPU order for binpack/binpack (`bench/placement.py --grid`, tuning seeds): "fuller GPU,
then lower start" among candidates of equal loss moves small requests between partly used GPUs as
they fill and drain, and the first-fit baseline (nodes by name, GPUs in order) refused less GPU-work
than that in most cells: a fixed order keeps the tail of the fleet empty for whole-GPU jobs. Fuller
node stays before it (what HAMi's node binpack means); without it, least loss then the fixed order
alone refused about as much work, within the seeds' spread (docs/packing.md, "The engine's last
change", gives the figures).

Fragmentation loss (`fragmentation`, compared in this order; capacity and the two placeable values
defined in `mig.placement.occupancy`):

- the node slots the placement destroys for pods asking for N ≥ 2 whole GPUs on one node
  (`mig.placement.demand.node_risk`): taking an empty GPU of a node whose empty GPUs are a multiple
  of N loses one such slot, priced by the work those pods are offered over the slots left fleet-wide
  (`demand.node_prices`); 0 for a GPU already in use and while no such pods arrive. First, so that a
  small request keeps the last whole nodes whole even where it would use less of a GPU elsewhere
  (real trace, `bench/placement.py --traces --tuning`: on the mixed fleet dynmig refused 8-GPU jobs of
  weeks that first fit placed, by spreading small requests over every node of the models where they
  use least of a GPU). On the held-out windows and the grid's training cells it also loses cells the
  engine without it did not (docs/packing.md, "Real traces"), so serve passes a node mix only with
  --node-pricing=true (webhooks/demand.py);
- opt-in (`PlacementIndex(keep_nodes_whole=True)`; 0 otherwise): whether the placement opens an empty
  node (`opens_node`: a GPU of a node of two or more GPUs that holds nothing). 1 ranks it after every
  placement on a node already in use, so a pod opens an empty node only when no used node can take it at
  its profile rank, and nodes stay whole for pods asking for a node's GPUs, with no demand estimate. It
  is about which node a pod opens, so it is read from the node before the pod and is the same for every
  GPU of that node and every device of the pod: it orders nodes (by the lead device's key) and never the
  GPUs of one node, and a pod's later devices on a node its first device opened are not ranked as
  opening it (they take the GPUs they take without the term). On a pool of one model every empty GPU's
  loss is the same and the fuller node already wins; on a mixed fleet the model share and the whole-GPU
  cost below send small requests and whole-GPU jobs to the model they use least or that is emptiest, and
  open every node of it (real trace, tuning windows: 8-GPU jobs of weeks refused that first fit placed;
  with this term 1.00× and 1.01× the best baseline there, against 6.35× and 5.43×). It lost two judged
  cells of the held-out windows (docs/packing.md, "The empty-node term"), so it is not the default;

0. the profile's share of its model's GPU (`occupancy.ProfileSet.share`: its compute slices over what
   the empty GPU holds): a request goes to the model where it uses the least of a GPU, whatever the
   demand prices below say (on a mixed fleet, pricing first sent 1g requests to the model whose large
   placements were priced lowest and refused more work than the engine without pricing; on one model
   this term is the same for every GPU);
1. the demand price of the free slots the placement destroys (`mig.placement.demand.risk_weights`):
   the work offered to half-GPU-or-larger profiles on this model over the slots of them still free,
   so the last empty GPUs are dear while whole-GPU jobs arrive;
2. usable capacity lost: compute slices the free part of the GPU can still hold, as a share of the GPU;
3. for a placement taking a whole GPU, its cost to the fleet (`whole_gpu_cost`): the GPU's compute
   slices over the share of its model's schedulable GPUs that are empty. A whole-GPU job goes to the
   model the smaller requests left empty, and between models about as empty to the one giving up
   fewer compute slices (an RTX PRO 6000's 4 before an A100's 7); 0 for smaller placements;
4. large placeable value lost: free placements spanning at least half the GPU that it destroys;
5. profile memory: between equal costs so far the profile with less memory, e.g. a 4 GB request takes
   an A100's 1g.5gb before an H100's 1g.10gb, which stays for a 9 GB request (best fit in memory),
   even where the H100 slot would have filled a GPU more neatly;
6. placeable value lost (the shape of the smaller placements that stay free).

Why 3 and 5 (bench/placement.py, inference-heavy workload: 1g/2g services with rare long whole-GPU
jobs): each small request already goes where it costs the least share of a GPU (an RTX PRO 6000's
quarter-GPU 1g last), so the model small requests use least is the one with empty GPUs left; a
whole-GPU job placed there gives up the fewest small slots. Without them dynmig refused about as
many pods as first-fit on that workload. Why memory before the small placements' shape (4 before 5):
with the whole value before memory, a 4 GB request took the H100 1g.10gb that fitted an H100 best
whenever that destroyed less value, and the 9 GB requests arriving later found the H100s full; this
order refused fewer pods over the bench's traces, and no trace did worse against its best baseline.
Memory before the large value instead let a 4 GB request break an A100's last half-GPU placement and
refused more, most of them on the mixed workload (docs/packing.md, "Memory before the small
placements' shape", gives the figures).
"""

from __future__ import annotations

from dataclasses import dataclass

from mig.placement.request import BINPACK, PodRequest
from mig.types import Placement


@dataclass(frozen=True)
class DevicePlacement:
    """One requested device's reservation: exactly what goes into `hami.io/vgpu-mig-allocations`."""

    container_index: int
    device_index: int
    node: str
    gpu_uuid: str
    profile: str
    placement: Placement
    memory_mb: int
    core: int


@dataclass(frozen=True)
class Plan:
    """Every requested device of the pod, on one node, in (containerIndex, deviceIndex) order."""

    node: str
    devices: tuple[DevicePlacement, ...]

    fits = True


Loss = tuple[int, int, int, int, int, float, int, int, int]
# What each term of a `Loss` is, in the order `fragmentation` returns and so compares them (the module
# docstring's node slots and empty node, then 0-6). docs/design.md lists the terms in this order, and
# tests/docs/test_design.py holds this list to `fragmentation` and to that page.
LOSS_TERMS = (
    "node slots",  # nodes
    "empty node",  # empty_node
    "model share",  # share
    "demand price",  # risk
    "capacity lost",  # loss[0]
    "whole-GPU cost",  # whole_cost
    "large value lost",  # loss[1]
    "memory",  # memory_mb
    "value lost",  # loss[2]
)


def whole_gpu_cost(compute_slices: int, model_gpus: int, model_empty: int) -> float:
    """What a placement taking a whole GPU costs: its compute slices over the share of its model's
    `model_gpus` schedulable GPUs that are empty (`model_empty`, at least the GPU itself)."""
    return compute_slices * model_gpus / model_empty


def opens_node(fill: float, empty: int) -> int:
    """1 when a node of `fill` (share of its schedulable GPUs' slices in use) and `empty` empty
    schedulable GPUs is empty and has at least two GPUs: a placement there opens a whole node, which
    the `empty node` term ranks after any placement on a node already in use; else 0."""
    return int(fill == 0.0 and empty >= 2)


def fragmentation(
    loss: tuple[int, int, int],
    whole_cost: float,
    memory_mb: int,
    risk: int = 0,
    share: int = 0,
    nodes: int = 0,
    empty_node: int = 0,
) -> Loss:
    """The fragmentation loss of a candidate (lower is better); see the module docstring.

    `nodes` is the price of the node slots for N-whole-GPU pods the placement destroys
    (`demand.node_risk`; 0 for a GPU already in use, and while no such pods are asked for);
    `empty_node` is 1 when the placement takes a GPU of an empty node (`opens_node`) and the index
    keeps nodes whole (opt-in), else 0;
    `share` is the profile's share of its model's GPU (`occupancy.ProfileSet.share`; 0 where every
    candidate compared is of one model);
    `risk` is the price of the free slots the placement destroys (`occupancy.ProfileSet.risk` under
    `demand.risk_weights`); `loss` is the GPU's own (capacity, large value, value) loss
    (`occupancy.Choice.loss`); `whole_cost` is `whole_gpu_cost` when the placement takes the whole
    GPU, else 0.0; `memory_mb` the profile's memory.
    """
    return (nodes, empty_node, share, risk, loss[0], whole_cost, loss[1], memory_mb, loss[2])


def rank_key(
    pod: PodRequest,
    rank: tuple[int, int],
    loss: Loss,
    node_used: float,
    gpu_used: float,
    start: int,
) -> tuple[object, ...]:
    """The comparison key of one candidate up to the fleet-order tie-breaks (lower is better).

    Append `(node, gpu_index, uuid)` for the full key; see the module docstring. Under binpack/binpack
    neither GPU fill nor the placement's start is in the key: the fleet's order decides among GPUs of
    equal loss on equally full nodes.
    """
    node_bin = pod.node_policy == BINPACK
    gpu_bin = pod.gpu_policy == BINPACK
    if node_bin and gpu_bin:
        return (rank, loss, -node_used)
    if node_bin:
        mid: tuple[object, ...] = (-node_used, gpu_used, loss)
    elif gpu_bin:
        mid = (node_used, loss, -gpu_used)
    else:
        mid = (node_used, gpu_used, loss)
    return (rank, *mid, start)
