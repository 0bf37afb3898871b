"""How server-side apply sees each field of the served kinds: a struct, a granular or atomic map, a
list merged by keys, a set, an atomic list, or a scalar.

kube-apiserver takes this from its OpenAPI schemas (`x-kubernetes-list-type`,
`x-kubernetes-list-map-keys`, `x-kubernetes-map-type`, generated from the `+listType`/`+listMapKey`/
`+structType`/`+mapType` markers of k8s.io/api); a list or map with no marker is atomic / granular
respectively. The field names and their types come from the official client's models (schemas.py);
the markers below are the Kubernetes 1.35 ones for the types the served kinds reach (checked against
the 1.35 OpenAPI definitions by tests/sim/test_server_side_apply.py). Anything without a model (an
unknown field, a `RawExtension`-like `object`) is typed from its value as structured-merge-diff's
deduced type does: maps granular, lists atomic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from sim.apiserver import schemas
from sim.apiserver.resources import ResourceType

# (model, field) -> (list type, map keys): lists merged by key ("map") or by value ("set")
LISTS: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {
    # resource.k8s.io/v1 (+listType=map markers of k8s.io/api/resource/v1 types.go)
    ("V1AllocatedDeviceStatus", "conditions"): ("map", ("type",)),
    ("V1ResourceClaimStatus", "devices"): ("map", ("driver", "device", "pool", "shareID")),
    ("V1ResourceClaimStatus", "reservedFor"): ("map", ("uid",)),
    ("V1Container", "env"): ("map", ("name",)),
    ("V1Container", "ports"): ("map", ("containerPort", "protocol")),
    ("V1Container", "volumeDevices"): ("map", ("devicePath",)),
    ("V1Container", "volumeMounts"): ("map", ("mountPath",)),
    ("V1ContainerRestartRuleOnExitCodes", "values"): ("set", ()),
    ("V1ContainerStatus", "allocatedResourcesStatus"): ("map", ("name",)),
    ("V1ContainerStatus", "volumeMounts"): ("map", ("mountPath",)),
    ("V1DaemonSetStatus", "conditions"): ("map", ("type",)),
    ("V1DeploymentStatus", "conditions"): ("map", ("type",)),
    ("V1ReplicaSetStatus", "conditions"): ("map", ("type",)),
    ("V1EphemeralContainer", "env"): ("map", ("name",)),
    ("V1EphemeralContainer", "ports"): ("map", ("containerPort", "protocol")),
    ("V1EphemeralContainer", "volumeDevices"): ("map", ("devicePath",)),
    ("V1EphemeralContainer", "volumeMounts"): ("map", ("mountPath",)),
    ("V1MutatingWebhook", "matchConditions"): ("map", ("name",)),
    ("V1MutatingWebhookConfiguration", "webhooks"): ("map", ("name",)),
    ("V1NamespaceStatus", "conditions"): ("map", ("type",)),
    ("V1NodeSpec", "podCIDRs"): ("set", ()),
    ("V1NodeStatus", "addresses"): ("map", ("type",)),
    ("V1NodeStatus", "conditions"): ("map", ("type",)),
    ("V1ObjectMeta", "finalizers"): ("set", ()),
    ("V1ObjectMeta", "ownerReferences"): ("map", ("uid",)),
    ("V1PodDisruptionBudgetStatus", "conditions"): ("map", ("type",)),
    ("V1PodFailurePolicyOnExitCodesRequirement", "values"): ("set", ()),
    ("V1PodSpec", "containers"): ("map", ("name",)),
    ("V1PodSpec", "ephemeralContainers"): ("map", ("name",)),
    ("V1PodSpec", "hostAliases"): ("map", ("ip",)),
    ("V1PodSpec", "imagePullSecrets"): ("map", ("name",)),
    ("V1PodSpec", "initContainers"): ("map", ("name",)),
    ("V1PodSpec", "resourceClaims"): ("map", ("name",)),
    ("V1PodSpec", "schedulingGates"): ("map", ("name",)),
    ("V1PodSpec", "topologySpreadConstraints"): ("map", ("topologyKey", "whenUnsatisfiable")),
    ("V1PodSpec", "volumes"): ("map", ("name",)),
    ("V1PodStatus", "conditions"): ("map", ("type",)),
    ("V1PodStatus", "podIPs"): ("map", ("ip",)),
    ("V1PodStatus", "resourceClaimStatuses"): ("map", ("name",)),
    ("V1ResourceRequirements", "claims"): ("map", ("name",)),
    ("V1ResourceStatus", "resources"): ("map", ("resourceID",)),
    ("V1ServiceAccount", "secrets"): ("map", ("name",)),
    ("V1ServiceSpec", "ports"): ("map", ("port", "protocol")),
    ("V1ServiceStatus", "conditions"): ("map", ("type",)),
    ("V1UncountedTerminatedPods", "failed"): ("set", ()),
    ("V1UncountedTerminatedPods", "succeeded"): ("set", ()),
    ("V1ValidatingAdmissionPolicyBindingSpec", "validationActions"): ("set", ()),
    ("V1ValidatingAdmissionPolicySpec", "matchConditions"): ("map", ("name",)),
    ("V1ValidatingAdmissionPolicySpec", "variables"): ("map", ("name",)),
    ("V1ValidatingAdmissionPolicyStatus", "conditions"): ("map", ("type",)),
    ("V1ValidatingWebhook", "matchConditions"): ("map", ("name",)),
    ("V1ValidatingWebhookConfiguration", "webhooks"): ("map", ("name",)),
}
# maps replaced whole (`+mapType=atomic`), by (model, field)
ATOMIC_MAPS = {("V1PodSpec", "nodeSelector"), ("V1ServiceSpec", "selector")}
# structs replaced whole (`+structType=atomic`)
ATOMIC_STRUCTS = {
    "RbacV1Subject",
    "V1ConfigMapKeySelector",
    "V1FileKeySelector",
    "V1LabelSelector",
    "V1LocalObjectReference",
    "V1MatchResources",
    "V1NamedRuleWithOperations",
    "V1NodeSelector",
    "V1NodeSelectorTerm",
    "V1ObjectFieldSelector",
    "V1ObjectReference",
    "V1OwnerReference",
    "V1ParamKind",
    "V1ParamRef",
    "V1ResourceFieldSelector",
    "V1RoleRef",
    "V1SecretKeySelector",
    "V1TypedLocalObjectReference",
    "V1Variable",
}
# a map key's schema default, used when an applied list item leaves that key out
KEY_DEFAULTS = {("V1ContainerPort", "protocol"): "TCP", ("V1ServicePort", "protocol"): "TCP"}

_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")


@dataclass(frozen=True)
class Shape:
    """What a value at one place is: kind is "struct", "map", "list" or "scalar"; `atomic` when it
    is owned and replaced whole; for a list, `mode` is "atomic", "map" or "set" with `keys`;
    `model` is a struct's client model, `item` the element type string of a map or list."""

    kind: str
    atomic: bool = False
    model: str = ""
    item: str = ""
    mode: str = "atomic"
    keys: tuple[str, ...] = ()


SCALAR = Shape("scalar", atomic=True)
UNTYPED_MAP = Shape("map", item="object")
UNTYPED_LIST = Shape("list", atomic=True, item="object")


def root(rt: ResourceType) -> str:
    """The type string of a kind's objects ("object" when the sim has no model for it)."""
    return schemas.model_of(rt) or "object"


@cache
def field_type(model: str, name: str) -> str | None:
    """The type string of a struct's field, or None for a field the model does not declare."""
    return schemas.fields_of(model).get(name)


def shape(type_str: str, value: Any, parent: str = "", field: str = "") -> Shape:
    """The shape of `value` declared as `type_str` (field `field` of model `parent`)."""
    if isinstance(value, dict):
        if schemas.is_model(type_str):
            return Shape("struct", atomic=type_str in ATOMIC_STRUCTS, model=type_str)
        m = _DICT.match(type_str)
        if m:
            return Shape("map", atomic=(parent, field) in ATOMIC_MAPS, item=m.group(1))
        return UNTYPED_MAP
    if isinstance(value, list):
        m = _LIST.match(type_str)
        if not m:
            return UNTYPED_LIST
        mode, keys = LISTS.get((parent, field), ("atomic", ()))
        return Shape("list", atomic=mode == "atomic", item=m.group(1), mode=mode, keys=keys)
    return SCALAR


def child_type(sh: Shape, key: str) -> tuple[str, bool]:
    """(type string, declared) of a struct's field or a map's entry."""
    if sh.kind == "struct":
        declared = field_type(sh.model, key)
        return (declared, True) if declared is not None else ("object", False)
    return sh.item, False
