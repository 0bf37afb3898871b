"""What a ResourceClaim's allocation asks of this node's plugin: pure reading, bounded, fail closed.

kube-scheduler writes `status.allocation.devices.results[]` = {request, driver, pool, device}; the
results of this driver in this node's pool are ours to prepare. Anything malformed refuses the
claim with a message naming the field (kubelet retries, the pod waits and its event says why):
never a guess about which GPU instance to create.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mig.jsontext import at

MAX_RESULTS = 32  # devices per claim: the API allows 32 requests × count; one node holds 56 MIG devices
_UID = re.compile(r"^[0-9a-zA-Z-]{1,64}$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class ClaimError(ValueError):
    """The claim cannot be prepared as it is; the message names the field."""


@dataclass(frozen=True)
class ClaimRef:
    """A claim as kubelet names it in NodePrepare/NodeUnprepare."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Result:
    """One allocated device of ours: the request it serves and the device's name in our pool."""

    request: str
    device: str


def check_ref(namespace: object, uid: object, name: object) -> ClaimRef:
    """A claim reference from kubelet, validated (names are DNS subdomains, the UID bounded)."""
    if not isinstance(uid, str) or not _UID.match(uid):
        raise ClaimError("claim uid: must be 1-64 letters, digits or '-'")
    for field, value in (("namespace", namespace), ("name", name)):
        if not isinstance(value, str) or not _NAME.match(value):
            raise ClaimError(f"claim {field}: must be a DNS subdomain, got {str(value)[:80]!r}")
    return ClaimRef(str(namespace), uid, str(name))


def allocated(claim: Mapping[str, Any], ref: ClaimRef, driver: str, pool: str) -> list[Result]:
    """The devices of `driver` in `pool` that the claim's allocation names, in result order."""
    if at(claim, "metadata", "uid") != ref.uid:
        raise ClaimError(f"claim {ref}: its uid is not {ref.uid} (a newer claim of the same name?)")
    results = at(claim, "status", "allocation", "devices", "results")
    if not isinstance(results, list):
        raise ClaimError(f"claim {ref}: status.allocation.devices.results: not allocated")
    out: list[Result] = []
    for i, r in enumerate(results):
        if not isinstance(r, Mapping) or r.get("driver") != driver:
            continue
        where = f"claim {ref}: status.allocation.devices.results[{i}]"
        if r.get("pool") != pool:
            raise ClaimError(f"{where}.pool: {str(r.get('pool'))[:80]!r} is not this node's pool {pool}")
        device, request = r.get("device"), r.get("request")
        if not isinstance(device, str) or not _NAME.match(device) or len(device) > 63:
            raise ClaimError(f"{where}.device: not a device name")
        if not isinstance(request, str) or not request or len(request) > 253:
            raise ClaimError(f"{where}.request: not a request name")
        out.append(Result(request, device))
        if len(out) > MAX_RESULTS:
            raise ClaimError(f"claim {ref}: more than {MAX_RESULTS} devices of {driver} on one node")
    if len({r.device for r in out}) != len(out):
        raise ClaimError(f"claim {ref}: one device allocated twice")
    return out
