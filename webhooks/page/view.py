"""What the page shows, read from serve's own cache (the nodes and pods the scheduler decides on),
through the same slice-map model as `dynmig status` (`dynmig.status.cluster`), so both say the same.

Bounded work per rendering, however big or hostile the cluster: at most `MAX_WAITING` waiting pods
are diagnosed (each diagnosis plans the pod once against every GPU); the others are only counted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dynmig.status.cluster import fleet_view
from mig.allowlist import ResourceNames
from mig.slicemap import FleetMap
from webhooks.cache import ClusterCache
from webhooks.page.render import MAX_PENDING, fragment

MAX_WAITING = MAX_PENDING + 1  # one more than listed, so the page can say that there are more


def _waiting(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec")
    return not (isinstance(spec, Mapping) and spec.get("nodeName"))


def _order(scheduler_name: str) -> Callable[[Mapping[str, Any]], tuple[bool, str, str]]:
    """Pods for our scheduler first (the webhook sets it on GPU pods), then by namespace and name."""

    def key(pod: Mapping[str, Any]) -> tuple[bool, str, str]:
        meta, spec = pod.get("metadata"), pod.get("spec")
        meta = meta if isinstance(meta, Mapping) else {}
        ours = isinstance(spec, Mapping) and spec.get("schedulerName") == scheduler_name
        return (not ours, str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    return key


def fleet_from(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], names: ResourceNames, scheduler_name: str = ""
) -> tuple[FleetMap, int]:
    """The slice map of these objects, and how many waiting pods were left out of it."""
    placed = [p for p in pods if not _waiting(p)]
    waiting = sorted((p for p in pods if _waiting(p)), key=_order(scheduler_name))
    return fleet_view(nodes, placed + waiting[:MAX_WAITING], names), max(0, len(waiting) - MAX_WAITING)


def renderer(
    cache: ClusterCache, names: Callable[[], ResourceNames], scheduler_name: str = ""
) -> Callable[[], str]:
    """The page's live fragment, rendered from the cache as it is at each call."""

    def render() -> str:
        if not cache.synced:
            return fragment(FleetMap((), {}), note="waiting for the node and pod caches to sync")
        nodes, pods = cache.objects()
        fleet, left_out = fleet_from(nodes, pods, names(), scheduler_name)
        note = f"{left_out} more pods wait for a node and are not shown" if left_out else ""
        return fragment(fleet, note=note)

    return render
