"""Which ResourceClaim a pod's `spec.resourceClaims[]` entry means, and whether the claim is the pod's.

The ResourceClaim controller and kube-scheduler's DynamicResources plugin both resolve a pod's
claims the same way, through one library; so do the simulated ones, through this module.

Checked against kubernetes `staging/src/k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go`
(`Name`, `IsForPod`, `IsReservedForPod`, `CanBeReserved`, `ErrClaimNotFound`, `ErrAPIUnsupported`)
and `pkg/controller/resourceclaim/controller.go` (`isPodDone`, `owningPod`, the
`resource.kubernetes.io/pod-claim-name` annotation). Objects are JSON dicts as the API serves them;
a malformed field is an error naming it, never an exception of another kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
FINALIZER = "resource.kubernetes.io/delete-protection"  # resourceapi.Finalizer
RESERVED_FOR_MAX = 256  # resourceapi.ResourceClaimReservedForMaxSize
TERMINAL = ("Succeeded", "Failed")


class ClaimNameError(ValueError):
    """The pod's claim has no name yet (not created) or uses a field this code does not know."""


@dataclass(frozen=True)
class Resolved:
    """`Name`'s answer: the claim's name (None: intentionally not created) and whether the caller
    must check that the claim is controlled by the pod (claims made from a template)."""

    name: str | None
    check_owner: bool


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def pod_key(pod: JSON) -> str:
    meta = _meta(pod)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pod_claims(pod: JSON) -> list[JSON]:
    """The pod's `spec.resourceClaims` entries; a malformed list is an error naming the field."""
    spec = pod.get("spec")
    claims = spec.get("resourceClaims") if isinstance(spec, dict) else None
    if claims is None:
        return []
    if not isinstance(claims, list) or not all(isinstance(c, dict) for c in claims):
        raise ClaimNameError(f'pod "{pod_key(pod)}": spec.resourceClaims must be a list of objects')
    return claims


def claim_name(pod: JSON, pod_claim: JSON) -> Resolved:
    """resourceclaim.Name: the name given, else the one the controller recorded in the pod's status."""
    if isinstance(pod_claim.get("resourceClaimName"), str):
        return Resolved(pod_claim["resourceClaimName"], False)
    if isinstance(pod_claim.get("resourceClaimTemplateName"), str):
        status = pod.get("status")
        for entry in (status.get("resourceClaimStatuses") if isinstance(status, dict) else None) or []:
            if isinstance(entry, dict) and entry.get("name") == pod_claim.get("name"):
                name = entry.get("resourceClaimName")
                return Resolved(name if isinstance(name, str) and name else None, True)
        raise ClaimNameError(f'pod "{pod_key(pod)}": ResourceClaim not created yet')
    raise ClaimNameError(
        f'pod "{pod_key(pod)}", spec.resourceClaim "{pod_claim.get("name")}": '
        "none of the supported fields are set"
    )


def controller_ref(obj: JSON) -> JSON | None:
    """The owner reference with controller=true, if any."""
    for ref in _meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def owning_pod(claim: JSON) -> tuple[str, str]:
    """(name, uid) of the pod controlling the claim, ("", "") when no pod does (owningPod)."""
    ref = controller_ref(claim)
    if ref is not None and ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod":
        return str(ref.get("name") or ""), str(ref.get("uid") or "")
    return "", ""


def is_for_pod(pod: JSON, claim: JSON) -> str:
    """IsForPod: "" when the claim is controlled by the pod, else upstream's error text."""
    pm, cm = _meta(pod), _meta(claim)
    ref = controller_ref(claim)
    if cm.get("namespace") != pm.get("namespace") or ref is None or ref.get("uid") != pm.get("uid"):
        return (
            f"ResourceClaim {cm.get('namespace')}/{cm.get('name')} was not created for pod "
            f"{pm.get('namespace')}/{pm.get('name')} (pod is not owner)"
        )
    return ""


def reserved_for(claim: JSON) -> list[JSON]:
    status = claim.get("status")
    entries = status.get("reservedFor") if isinstance(status, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def allocation(claim: JSON) -> JSON | None:
    status = claim.get("status")
    found = status.get("allocation") if isinstance(status, dict) else None
    return found if isinstance(found, dict) else None


def is_reserved_for_pod(pod: JSON, claim: JSON) -> bool:
    uid = _meta(pod).get("uid")
    return any(e.get("uid") == uid for e in reserved_for(claim))


def can_be_reserved(claim: JSON) -> bool:
    """CanBeReserved: a claim may be shared by up to RESERVED_FOR_MAX consumers."""
    return len(reserved_for(claim)) < RESERVED_FOR_MAX


def is_pod_done(pod: JSON) -> bool:
    """isPodDone: certain that none of its containers run or will run: a terminal phase, or deleted
    before it was scheduled."""
    status, spec = pod.get("status"), pod.get("spec")
    phase = status.get("phase") if isinstance(status, dict) else None
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    return phase in TERMINAL or (bool(_meta(pod).get("deletionTimestamp")) and not node)


def has_finalizer(claim: JSON) -> bool:
    return FINALIZER in (_meta(claim).get("finalizers") or [])
