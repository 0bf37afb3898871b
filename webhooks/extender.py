"""kube-scheduler extender wire types (k8s.io/kube-scheduler/extender/v1).

The Go structs have no json tags, so keys are the Go field names (PascalCase). kube-scheduler
always sends every key (nil → null) and decodes our reply case-insensitively, ignoring unknown keys;
the reply must be HTTP 200 with errors carried in `Error`.

With `nodeCacheCapable: true` the scheduler sends `NodeNames` and reads `NodeNames` back; without
it, it sends a full `Nodes` list and reads `Nodes` back. Both are handled: the reply mirrors the
form of the request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class BadArgs(ValueError):
    """Extender arguments we cannot act on; the message names the field."""


@dataclass(frozen=True)
class ExtenderArgs:
    pod: dict[str, Any]
    node_names: tuple[str, ...]
    nodes: tuple[dict[str, Any], ...] | None  # full node objects when not nodeCacheCapable

    @staticmethod
    def parse(body: dict[str, Any]) -> ExtenderArgs:
        pod = body.get("Pod")
        if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
            raise BadArgs("extender args missing pod (Pod)")
        raw_nodes = body.get("Nodes")
        if isinstance(raw_nodes, dict):
            items = raw_nodes.get("items") or []
            if not isinstance(items, list):
                raise BadArgs("Nodes.items must be a list of nodes")
            nodes = tuple(n for n in items if isinstance(n, dict))
            names = tuple((n.get("metadata") or {}).get("name", "") for n in nodes)
            return ExtenderArgs(pod, names, nodes)
        names = body.get("NodeNames")
        if names is None:
            return ExtenderArgs(pod, (), None)
        if not isinstance(names, list) or not frozenset(map(type, names)) <= {str}:  # C speed at 5,000 names
            raise BadArgs("NodeNames must be a list of node names")
        return ExtenderArgs(pod, tuple(names), None)


@dataclass(frozen=True)
class ExtenderFilterResult:
    node_names: list[str] | None = None
    nodes: list[dict[str, Any]] | None = None
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""

    def to_wire(self, full_nodes: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "NodeNames": None if full_nodes else self.node_names,
            "Nodes": {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": self.nodes or []}
            if full_nodes and self.nodes is not None else None,
            "FailedNodes": self.failed,
            "FailedAndUnresolvableNodes": self.unresolvable,
            "Error": self.error,
        }
        return out


@dataclass(frozen=True)
class ExtenderBindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str

    @staticmethod
    def parse(body: dict[str, Any]) -> ExtenderBindingArgs:
        values = {k: body.get(k) for k in ("PodName", "PodNamespace", "PodUID", "Node")}
        for key in ("PodName", "PodNamespace", "Node"):
            if not isinstance(values[key], str) or not values[key]:
                raise BadArgs(f"binding args: {key} is missing")
        return ExtenderBindingArgs(values["PodName"], values["PodNamespace"], str(values["PodUID"] or ""),
                                   values["Node"])


def bind_result(error: str = "") -> dict[str, Any]:
    return {"Error": error}
