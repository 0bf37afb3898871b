"""The resource types the simulated API server serves, as one table.

Why a table: discovery, routing, field selectors and printing all derive from it, so adding a
plain stored resource is one line and every part agrees on names, kinds and scope.

resource.k8s.io/v1 (DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate): scope, the
claim's status subresource and the slice's field labels as kubernetes/kubernetes
`pkg/registry/resource/*/strategy.go` and `storage/storage.go` define them (no short names).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.apiserver.events import V1_FIELD_LABELS


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    field_labels: tuple[str, ...] = ()
    # Resources whose main endpoint ignores status changes (status is written via /status).
    status_via_subresource: bool = False
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )
    singular: str = ""
    categories: tuple[str, ...] = field(default=())
    # The resource whose storage this one is served from, converted (events.k8s.io events are core
    # events); () when it has its own.
    stored_as: tuple[str, str] = ()
    # Field selector labels whose path in the stored object is another one (label, stored label).
    field_paths: tuple[tuple[str, str], ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def storage_key(self) -> tuple[str, str]:
        return self.stored_as or self.key

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()


POD_FIELDS = (
    "spec.nodeName",
    "spec.schedulerName",
    "status.phase",
    "spec.serviceAccountName",
    "spec.restartPolicy",
    "status.podIP",
    "status.nominatedNodeName",
)
EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
# pkg/registry/resource/resourceslice/strategy.go toSelectableFields (an unset nodeName is "")
RESOURCE_SLICE_FIELDS = ("spec.nodeName", "spec.driver")

RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        ("ns",),
        ("status",),
        ("status.phase",),
        status_via_subresource=True,
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        ("po",),
        ("binding", "status", "log", "eviction", "exec", "attach", "portforward"),
        POD_FIELDS,
        status_via_subresource=True,
        categories=("all",),
    ),
    ResourceType(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        ("no",),
        ("status",),
        ("spec.unschedulable",),
        status_via_subresource=True,
    ),
    ResourceType("", "v1", "events", "Event", True, ("ev",), (), EVENT_FIELDS),
    ResourceType("", "v1", "secrets", "Secret", True, (), (), ("type",)),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    ResourceType("", "v1", "services", "Service", True, ("svc",), ("status",), categories=("all",)),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",)),
    ResourceType("", "v1", "bindings", "Binding", True, verbs=("create",)),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        ("pdb",),
        ("status",),
        status_via_subresource=True,
    ),
    ResourceType(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        True,
        ("ev",),
        (),
        tuple(V1_FIELD_LABELS),
        stored_as=("", "events"),
        field_paths=tuple(V1_FIELD_LABELS.items()),
    ),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        ("deploy",),
        ("status", "scale"),
        categories=("all",),
    ),
    ResourceType(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        ("rs",),
        ("status", "scale"),
        status_via_subresource=True,
        categories=("all",),
    ),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), ("status",), categories=("all",)),
    # Plain stored kinds a chart installs (no controller runs them: a Job's status is whoever writes it)
    ResourceType(
        "batch", "v1", "jobs", "Job", True, (), ("status",), status_via_subresource=True, categories=("all",)
    ),
    # Dynamic Resource Allocation (resource_strategy.py has what their strategies do)
    ResourceType("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
    ResourceType(
        "resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False, (), (), RESOURCE_SLICE_FIELDS
    ),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "resourceclaims",
        "ResourceClaim",
        True,
        (),
        ("status",),
        status_via_subresource=True,
    ),
    ResourceType("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    # Reviews: answered at once, never stored (reviews.py)
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        False,
        verbs=("create",),
    ),
    ResourceType(
        "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False, verbs=("create",)
    ),
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "localsubjectaccessreviews",
        "LocalSubjectAccessReview",
        True,
        verbs=("create",),
    ),
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
        False,
        verbs=("create",),
    ),
    ResourceType(
        "authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False, verbs=("create",)
    ),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ("netpol",)),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        False,
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        False,
        (),
        ("status",),
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        False,
    ),
)

BY_KEY: dict[tuple[str, str], ResourceType] = {r.key: r for r in RESOURCES}
# Create-only resources (Bindings, written through pods/binding; reviews, answered at once) are
# never stored. A resource served from another one's storage has no table of its own.
STORED = tuple(r for r in RESOURCES if r.verbs != ("create",) and not r.stored_as)


def groups() -> dict[str, list[ResourceType]]:
    """Named API groups (not the core group) with their resources, in table order."""
    out: dict[str, list[ResourceType]] = {}
    for r in RESOURCES:
        if r.group:
            out.setdefault(r.group, []).append(r)
    return out


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    r = BY_KEY.get((group, plural))
    if r is None or r.version != version:
        return None
    return r
