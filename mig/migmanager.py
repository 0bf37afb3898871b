"""GPU Operator's MIG Manager requests, read as dynmig requests: `nvidia.com/mig-<profile>: N`.

With NVIDIA's device plugin in `mixed` MIG strategy every MIG profile is its own extended resource,
`nvidia.com/mig-` + the profile name with `+` spelled `.` (`nvidia.com/mig-1g.10gb`,
`nvidia.com/mig-1g.10gb.me` for `1g.10gb+me`). dynmig reads such a container as N devices of at
least that profile's memory, with that profile preferred (`translate`):

- The MiB is the *least* the profile holds on any model that offers it (a 1g.10gb holds 9,728 MiB
  on an A100-80GB, 9,984 on an H100): the smallest allowed profile with that much memory is then the
  named one wherever it is allowed. The named size is never used (1g.10gb is not 10,240 MiB: that
  asks a 2g.20gb on an H100), nor the largest figure (it skips the 1g.10gb of an A100-80GB).
- The profile goes into `nvidia.com/mig-profile-preference` when the allowlist allows it; a profile
  the allowlist does not allow (but a catalog model has) still sets the MiB, and the pod gets the
  smallest allowed profile with that much memory.
- Refused, each with the fix: a name no model has (the nearest allowed profiles named); a profile
  no allowed profile can hold; a container asking for two profiles, or a profile beside dynmig's own
  resources; a pod mixing `nvidia.com/mig-*` with `nvidia.com/gpu`/`gpumem` (one pod-wide preference
  would change the other container's meaning) or already carrying a profile preference; two
  containers whose profiles one pod-wide preference cannot tell apart (a 3g.40gb and a 4g.40gb).
- Bounded: at most `MAX_RESOURCES` such resources per pod, names up to `MAX_NAME` characters,
  counts read as whole quantities up to the most devices dynmig places for one pod.

Pure: pod JSON and offers in, a `Translation` out; admission turns it into a JSON patch.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mig import catalog
from mig.allowlist import ResourceNames
from mig.annotations import PROFILE_PREFERENCE
from mig.offers import Offer, short_name
from mig.placement.request import MAX_DEVICES, RequestError, whole_resource
from mig.pods import Container, container_label, resources

PREFIX = "nvidia.com/mig-"
MAX_RESOURCES = 16  # a pod asking for more MIG profiles than this is not a MIG Manager workload
MAX_NAME = 63  # the name part of an extended resource is a DNS label or subdomain part
_SHAPE = re.compile(r"^[1-9][0-9]?g\.[a-z0-9][a-z0-9.+-]*$")


@dataclass(frozen=True)
class Move:
    """One container's MIG Manager request and what it becomes."""

    field: str  # "initContainers" or "containers"
    index: int
    label: str
    resource: str  # the name as written, e.g. "nvidia.com/mig-1g.10gb"
    kinds: tuple[str, ...]  # where it was written: "limits", "requests"
    devices: int
    profile: str  # the profile it names, e.g. "1g.10gb+me"
    memory_mib: int
    allowed: bool  # the allowlist allows the profile (it goes into the preference)


@dataclass(frozen=True)
class Translation:
    moves: tuple[Move, ...] = ()
    preference: tuple[str, ...] = ()
    refusal: str = ""
    warnings: tuple[str, ...] = field(default=())


def mig_resources(container: Mapping[str, Any]) -> list[str]:
    """The `nvidia.com/mig-*` names in a container's limits and requests (limits first, once each)."""
    keys = [str(k) for kind in ("limits", "requests") for k in resources(container, kind)]
    return list(dict.fromkeys(k for k in keys if k.startswith(PREFIX)))


def translate(
    listed: Sequence[Container],
    annotations: Mapping[str, Any],
    names: ResourceNames,
    offers: Sequence[Offer],
    dra_served: Collection[str] = (),
) -> Translation:
    """What the pod's `nvidia.com/mig-*` requests become, or why they are refused (`Translation()`
    when it asks for none). A name in `dra_served` is a DRA extended resource (a DeviceClass maps it)
    and is left for kube-scheduler to allocate on DRA nodes."""
    asked = [(key, i, c, [r for r in mig_resources(c) if r not in dra_served]) for key, i, c in listed]
    asked = [a for a in asked if a[3]]
    if not asked:
        return Translation()
    try:
        _check_pod(asked, listed, annotations, names)
        moves = tuple(_move(key, i, c, found[0], offers) for key, i, c, found in asked)
        preference = _preference(moves, offers)
    except RequestError as error:
        return Translation(refusal=str(error))
    kept = tuple(m for m in moves if m.devices)
    return Translation(kept, preference, warnings=tuple(_said(m, names) for m in moves))


def _check_pod(
    asked: list[tuple[str, int, Mapping[str, Any], list[str]]],
    listed: Sequence[Container],
    annotations: Mapping[str, Any],
    names: ResourceNames,
) -> None:
    total = sum(len(found) for *_, found in asked)
    if total > MAX_RESOURCES:
        raise RequestError(
            f"the pod asks for {total} {PREFIX}* resources; at most {MAX_RESOURCES} are read (one per container)"
        )
    own = (names.count, names.memory, names.memory_percentage)
    for key, i, c, found in asked:
        label = container_label(key, i, c)
        if len(found) > 1:
            raise RequestError(
                f"container {label} asks for {', '.join(f[:80] for f in found)}: dynmig gives a container devices "
                f"of one size; put each profile in its own container"
            )
        mixed = [n for n in own for kind in ("limits", "requests") if n in resources(c, kind)]
        if mixed:
            raise RequestError(
                f"container {label} asks for {found[0][:80]} and {mixed[0]}: ask one way, either the MIG "
                f"profile or {names.count} with {names.memory}"
            )
    others = [
        container_label(key, i, c)
        for key, i, c in listed
        if any(n in resources(c, kind) for n in own for kind in ("limits", "requests"))
    ]
    if others:
        raise RequestError(
            f"the pod mixes {PREFIX}* resources with {names.count}/{names.memory} (container "
            f"{others[0]}): the profile preference they become is pod-wide and would change that container's "
            f"request; ask every container the same way"
        )
    if PROFILE_PREFERENCE in annotations:
        raise RequestError(
            f"the pod sets {PROFILE_PREFERENCE} and asks for {PREFIX}* resources, which set it "
            f"too; remove the annotation, or write {names.count} with {names.memory} instead"
        )


def _count(label: str, c: Mapping[str, Any], resource: str) -> tuple[int, tuple[str, ...]]:
    kinds = tuple(kind for kind in ("limits", "requests") if resource in resources(c, kind))
    devices = whole_resource(label, resource[:80], resources(c, kinds[0])[resource])
    if devices > MAX_DEVICES:
        raise RequestError(
            f"container {label}: {resource[:80]} {devices} is more than {MAX_DEVICES} devices, the most "
            f"dynmig places for one pod"
        )
    return devices, kinds


def _move(key: str, i: int, c: Mapping[str, Any], resource: str, offers: Sequence[Offer]) -> Move:
    label = container_label(key, i, c)
    devices, kinds = _count(label, c, resource)
    profile = _profile(label, resource, offers)
    allowed = [mib for o in offers if (mib := o.memory_of(profile)) is not None]
    known = allowed or _catalog_memory(profile)
    if not known:
        raise RequestError(
            f"container {label}: {resource[:80]} names no MIG profile of any GPU dynmig knows; "
            f"{_nearest_text(profile, offers)}"
        )
    mib = min(known)
    if not any(p[1] >= mib for o in offers for p in o.profiles):
        raise RequestError(
            f"container {label}: {resource[:80]} needs {mib} MiB (a {profile}), more than any allowed "
            f"profile holds; {_largest_text(offers)}"
        )
    return Move(key, i, label, resource, kinds, devices, profile, mib, bool(allowed))


def _profile(label: str, resource: str, offers: Sequence[Offer]) -> str:
    """The profile a resource names: its text after the prefix, with the device plugin's `.` for `+`
    read back when that names a known profile."""
    text = resource[len(PREFIX) :]
    if len(text) > MAX_NAME or not _SHAPE.match(text):
        raise RequestError(
            f"container {label}: {resource[:80]!r} is not a MIG profile resource; GPU Operator names them "
            f"{PREFIX}<profile> (e.g. {PREFIX}1g.10gb); {_nearest_text(text[:MAX_NAME], offers)}"
        )
    known = _known_names(offers)
    if text in known:
        return text
    spelled = {n.replace("+", "."): n for n in sorted(known)}
    return spelled.get(text, text)


def _known_names(offers: Sequence[Offer]) -> set[str]:
    return {n for o in offers for n, _ in o.profiles} | set(catalog.all_profile_names())


def _catalog_memory(profile: str) -> list[int]:
    """The profile's MiB on every catalog model that has it (allowed or not)."""
    return [s.memory_mib for m in catalog.MODELS if (s := m.profile(profile)) is not None]


def _allowed_names(offers: Sequence[Offer]) -> list[str]:
    return sorted({n for o in offers for n, _ in o.profiles})


_SIZE = re.compile(r"^([0-9]+)g\.([0-9]+)gb")


def _nearest_text(profile: str, offers: Sequence[Offer]) -> str:
    """The allowed profiles closest in size (`1g.11gb`: 1g.10gb, 1g.12gb), else in spelling."""
    allowed = _allowed_names(offers)
    size = _SIZE.match(profile)
    if size:
        want = (int(size[2]), int(size[1]))
        sized = [(m, n) for n in allowed if (m := _SIZE.match(n))]
        close = [
            n
            for m, n in sorted(
                sized, key=lambda s: (abs(int(s[0][2]) - want[0]), abs(int(s[0][1]) - want[1]), s[1])
            )
        ]
    else:
        close = difflib.get_close_matches(profile, allowed, n=3, cutoff=0.5) or allowed
    return f"nearest allowed profiles: {', '.join(close[:3]) or 'none (the allowlist allows none)'}"


def _largest_text(offers: Sequence[Offer]) -> str:
    tops = sorted(
        {(o.largest[1], o.largest[0], short_name(o.model)) for o in offers if o.largest}, reverse=True
    )[:3]
    return "nearest allowed profiles: " + ", ".join(f"{n} ({mib} MiB on {m})" for mib, n, m in tops)


def _preference(moves: tuple[Move, ...], offers: Sequence[Offer]) -> tuple[str, ...]:
    """The allowed profiles, smallest memory first, each preferred only by the container asking it:
    refused when an earlier entry would also cover a later container's MiB on some model."""
    ordered = sorted({(m.memory_mib, m.profile) for m in moves if m.allowed and m.devices})
    for n, (_, earlier) in enumerate(ordered):
        for mib, later in ordered[n + 1 :]:
            hit = next((o for o in offers if (o.memory_of(earlier) or 0) >= mib), None)
            if hit is not None:
                raise RequestError(
                    f"the pod asks for {PREFIX}{later} and {PREFIX}{earlier}, and a {earlier} on "
                    f"{short_name(hit.model)} holds as much as a {later}: one pod-wide preference cannot give "
                    f"each container its own; put them in separate pods"
                )
    return tuple(p for _, p in ordered)


def _said(m: Move, names: ResourceNames) -> str:
    """The admission warning saying what a container's request became."""
    head = f"container {m.label}: {m.resource[:80]}: {m.devices} (MIG Manager's name) "
    if not m.devices:
        return head + "asks for no device, so dynmig leaves it as written"
    became = f"became {names.count}: {m.devices}, {names.memory}: {m.memory_mib}"
    if m.allowed:
        return f"{head}{became} (the least MiB of a {m.profile}) preferring {m.profile}"
    return (
        f"{head}{became}; {m.profile} is not allowed, so it gets the smallest allowed profile that holds it"
    )
