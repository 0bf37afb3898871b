"""What the page shows, read from serve's own memory: the scheduler's `Fleet` (each node's decoded
occupancy and its placement index) and its watch cache (the pods), drawn with the same slice-map
model as `dynmig status` (`mig.slicemap`, `mig.fleetview.pending_view`), so both say the same.

Bounded work per rendering, however big or hostile the cluster:
- a node's section is rebuilt only when the Fleet replaced its occupancy (a pod came, went or was
  realized there), its leftover list or its idle list changed, or one of its pods started
  terminating; otherwise the HTML drawn last time is reused, so a rendering costs about the nodes
  that changed;
- the idle list (`dynmig.io/node-idle-instances`) is read from the watch cache's Node objects: the
  Fleet does not keep it, as it never occupies anything (an unreadable one is said on the node, and
  changes nothing else);
- pending pods are diagnosed against the scheduler's own placement index (`Fleet.diagnose`, under
  its lock one pod at a time, so a filter never waits for more than one diagnosis), over the nodes each may run
  on (`mig.eligibility`, from the watch cache's Node objects), and at most `MAX_WAITING` of them;
  the others are only counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mig.allowlist import ResourceNames
from mig.fleetview import UNREADABLE, Eligibilities, gpu_view, idle_view, pending_view
from mig.leftovers import Leftover, LeftoverError, decode_leftovers
from mig.pods import active_for_scheduler, is_terminating, metadata_of, qualified_name
from mig.reconstruct import NodeGpus, NodeOccupancy, node_idle
from mig.slicemap import NodeMap, PendingPod, fleet_map, node_map
from webhooks.fleet import Fleet
from webhooks.page.render import MAX_PENDING, compose, node_section

MAX_WAITING = MAX_PENDING + 1  # one more than listed, so the page can say that there are more


def node_view(
    published: NodeGpus,
    occupancy: NodeOccupancy,
    leftovers_text: str | None,
    terminating: frozenset[str],
    idle_text: object = None,
) -> NodeMap:
    """One node's map from what the Fleet holds for it; `terminating`: "ns/name" of its pods being
    deleted; `idle_text`: the node's idle list as its Node object carries it."""
    if published.error:
        return node_map(published.node, (), UNREADABLE + published.error)
    try:
        leftovers: Sequence[Leftover] = decode_leftovers(leftovers_text)
    except LeftoverError:
        leftovers = ()  # the Fleet already failed every GPU of the node closed with the reason
    idle, idle_unreadable = idle_view(idle_text)
    gpus = [gpu_view(occupancy, state, leftovers, terminating, idle) for state in occupancy.gpus]
    return node_map(published.node, gpus, idle_unreadable=idle_unreadable)


@dataclass
class _Drawn:
    occupancy: NodeOccupancy
    leftovers: str | None
    idle: object
    terminating: frozenset[str]
    map: NodeMap
    html: str


class FleetPage:
    """Renders the page's live fragment from the Fleet and the pods of the watch cache (`pods`: the
    cache's pods now; `synced`: whether the caches have synced), reusing unchanged nodes."""

    def __init__(
        self,
        fleet: Fleet,
        pods: Callable[[], list[dict[str, Any]]],
        synced: Callable[[], bool],
        names: Callable[[], ResourceNames],
        scheduler_name: str = "",
        nodes: Callable[[], Iterable[Mapping[str, Any]]] = lambda: (),
        dra: Callable[[], Sequence[NodeMap]] = lambda: (),
        dra_pending: Callable[[list[dict[str, Any]]], list[PendingPod]] = lambda pods: [],
    ):
        self.fleet, self.pods, self.synced = fleet, pods, synced
        self.names, self.scheduler_name = names, scheduler_name
        self.nodes = nodes  # the Node objects now (labels, taints): which nodes a pending pod may run on
        self._drawn: dict[str, _Drawn] = {}
        self.nodes_drawn = 0  # node sections built (not reused) so far
        self.dra = dra  # DRA nodes' maps (webhooks/dracache), drawn after the extender's nodes
        self._dra_html: dict[str, tuple[NodeMap, str]] = {}
        self.dra_pending = dra_pending  # pods waiting for DRA claims of dynmig's driver

    def __call__(self) -> str:
        if not self.synced():
            return compose(fleet_map([]), [], note="waiting for the node and pod caches to sync")
        pods = self.pods()
        terminating = {qualified_name(p) for p in pods if is_terminating(p)}
        sections = self._nodes(terminating)
        pending, left_out = self._pending(pods)
        pending += self.dra_pending(pods)[:MAX_WAITING]
        fleet = fleet_map([d.map for d in sections], pending)
        note = f"{left_out} more pods wait for a node and are not shown" if left_out else ""
        return compose(fleet, [d.html for d in sections] + self._dra_sections(), note=note)

    def _dra_sections(self) -> list[str]:
        """The DRA nodes' sections; a node whose map did not change reuses its HTML."""
        known = {d.map.name for d in self._drawn.values()}
        maps = [m for m in self.dra() if m.name not in known]
        drawn = {}
        for m in maps:
            last = self._dra_html.get(m.name)
            drawn[m.name] = last if last is not None and last[0] is m else (m, node_section(m))
        self._dra_html = drawn
        return [html for _, html in drawn.values()]

    def _idle_texts(self) -> dict[str, object]:
        """Node name -> its idle list as the watch cache's Node object carries it."""
        out: dict[str, object] = {}
        for node in self.nodes():
            if isinstance(node, Mapping):
                out[str(metadata_of(node).get("name") or "")] = node_idle(node)
        return out

    def _nodes(self, terminating: set[str]) -> list[_Drawn]:
        drawn: dict[str, _Drawn] = {}
        idle_texts = self._idle_texts()
        for published, occupancy, leftovers in self.fleet.node_views():
            idle = idle_texts.get(published.node)
            mine = frozenset(
                who
                for holders in occupancy.holders.values()
                for u, _ in holders
                if (who := f"{u.namespace}/{u.name}") in terminating
            )
            last = self._drawn.get(published.node)
            if (
                last is None
                or last.occupancy is not occupancy
                or last.leftovers != leftovers
                or last.idle != idle
                or last.terminating != mine
            ):
                view = node_view(published, occupancy, leftovers, mine, idle)
                last = _Drawn(occupancy, leftovers, idle, mine, view, node_section(view))
                self.nodes_drawn += 1
            drawn[published.node] = last
        self._drawn = drawn  # nodes that are gone are forgotten
        return [drawn[n] for n in sorted(drawn)]

    def _waiting(self, pod: Mapping[str, Any]) -> bool:
        spec = pod.get("spec")
        uid = str(metadata_of(pod).get("uid") or "")
        return (
            not (isinstance(spec, Mapping) and spec.get("nodeName"))
            and active_for_scheduler(pod)
            and not is_terminating(pod)
            and not self.fleet.counted(uid)  # held or reserved: drawn as a segment, not as pending
        )

    def _order(self, pod: Mapping[str, Any]) -> tuple[bool, str, str]:
        """Pods for our scheduler first (the webhook sets it on GPU pods), then by namespace and name."""
        meta, spec = metadata_of(pod), pod.get("spec")
        ours = isinstance(spec, Mapping) and spec.get("schedulerName") == self.scheduler_name
        return (not ours, str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    def _eligibilities(self) -> Eligibilities:
        """Which nodes with MIG GPUs pods may run on, from the Node objects the cache holds."""
        objects = {str(metadata_of(n).get("name") or ""): n for n in self.nodes() if isinstance(n, Mapping)}
        return Eligibilities((name, objects.get(name)) for name in self.fleet.nodes())

    def _pending(self, pods: list[dict[str, Any]]) -> tuple[list[PendingPod], int]:
        waiting = sorted((p for p in pods if self._waiting(p)), key=self._order)
        names = self.names()
        pending = []
        eligible = self._eligibilities() if waiting else None
        for pod in waiting[:MAX_WAITING]:
            allowed = eligible(pod) if eligible is not None else None
            view = pending_view(
                pod,
                (),
                names,
                diagnosis=self.fleet.diagnose,  # the scheduler's index, read between two of its decisions
                eligible=allowed,
                scheduler=self.scheduler_name,
            )
            if view is not None:
                pending.append(view)
        return pending, max(0, len(waiting) - MAX_WAITING)
