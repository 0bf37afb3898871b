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
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from webhooks.objects import MAX_NAME, MAX_NODE_NAMES, Name, Node, ObjectError, Pod, check

M = TypeVar("M", bound=BaseModel)

MAX_BODY_BYTES = 8 * 1024 * 1024  # 15,000 NodeNames or a few thousand full Node objects


class BadArgs(ValueError):
    """Extender arguments we cannot act on; the message names the field (answered in `Error`)."""


class WireError(BadArgs):
    """A body that is not extender arguments at all (wrong types, sizes): answered with HTTP 400.
    kube-scheduler's own encoder never sends one, so only a hostile or broken caller sees it."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _NodeList(_Wire):
    items: Annotated[list[Node], Field(max_length=MAX_NODE_NAMES)] | None = None


class _FilterArgs(_Wire):
    Pod: dict[str, Any] | None = None
    Nodes: _NodeList | None = None
    NodeNames: Annotated[list[Any], Field(max_length=MAX_NODE_NAMES)] | None = None  # checked below, faster


class _BindingArgs(_Wire):
    PodName: Name | None = None
    PodNamespace: Name | None = None
    PodUID: Name | None = None
    Node: Name | None = None


def _checked(model: type[M], data: Any, where: str) -> M:
    try:
        return check(model, data, where)
    except ObjectError as error:
        raise WireError(f"{error.path.lstrip('.')}: {error.problem}") from None


def _node_names(names: list[Any]) -> tuple[str, ...]:
    """NodeNames as strings of at most MAX_NAME characters (checked at C speed: 5,000 names are common)."""
    try:
        "".join(names)  # TypeError unless every name is a string (a C loop: the cheapest such test)
        if max(map(len, names), default=0) <= MAX_NAME:
            return tuple(names)
    except TypeError:
        pass
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise WireError(f"NodeNames[{i}]: must be a string")
        if len(name) > MAX_NAME:
            raise WireError(f"NodeNames[{i}]: is too long (the limit is {MAX_NAME})")
    return tuple(names)


@dataclass(frozen=True)
class ExtenderArgs:
    pod: dict[str, Any]  # as sent; its known fields are type-checked (`meta`)
    node_names: tuple[str, ...]
    nodes: tuple[dict[str, Any], ...] | None  # full node objects when not nodeCacheCapable
    meta: Any = None  # the pod's ObjectMeta model

    @staticmethod
    def parse(body: Any) -> ExtenderArgs:
        if not isinstance(body, dict):
            raise WireError("extender args must be a JSON object")
        args = _checked(_FilterArgs, body, "")
        pod = _checked(Pod, args.Pod, "Pod") if args.Pod is not None else None
        if pod is None or pod.metadata is None:
            raise WireError("extender args missing pod (Pod)")
        if args.Nodes is not None:
            items = body["Nodes"].get("items") or []
            nodes = tuple(items)
            names = tuple((n.metadata.name if n.metadata else None) or "" for n in args.Nodes.items or ())
            return ExtenderArgs(body["Pod"], names, nodes, pod.metadata)
        if args.NodeNames is None:
            return ExtenderArgs(body["Pod"], (), None, pod.metadata)
        return ExtenderArgs(body["Pod"], _node_names(args.NodeNames), None, pod.metadata)


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
            if full_nodes and self.nodes is not None
            else None,
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
    def parse(body: Any) -> ExtenderBindingArgs:
        if not isinstance(body, dict):
            raise WireError("binding args must be a JSON object")
        args = _checked(_BindingArgs, body, "")
        name, namespace = _required(args.PodName, "PodName"), _required(args.PodNamespace, "PodNamespace")
        return ExtenderBindingArgs(name, namespace, args.PodUID or "", _required(args.Node, "Node"))


def _required(value: str | None, key: str) -> str:
    if not value:
        raise BadArgs(f"binding args: {key} is missing")
    return value


def bind_result(error: str = "") -> dict[str, Any]:
    return {"Error": error}
