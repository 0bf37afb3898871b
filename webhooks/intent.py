"""Intent never ignored in silence: what admission says back about a pod's GPU request.

Warnings (the AdmissionReview `warnings` field, shown by kubectl as `Warning: ...`) for annotation
keys and resource names that look like dynmig's or HAMi's but are not (`nvidia.com/gpumemory`), for
a profile preference no allowed profile can meet, for `nvidia.com/gpumem: "0"` (a whole GPU) and for
a `gpumem-percentage` just above a smaller profile's MiB (50 % gets a whole GPU on every model). A
gpumem written in bytes (`8Gi`) is refused by the one memory reading, `mig.placement.request.memory_mib`.
Warnings are bounded in count and length whatever the pod carries.

A preference that cannot be met is a warning, not a denial (docs/policy.md): HAMi refuses only an
entry that matches no profile in any allowlist entry (dynmig does too, in `check_preference`), a
preference never makes a GPU unschedulable, and the fleet a pod may land on changes as nodes join.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mig import annotations as keys
from mig.allowlist import Allowlist, ResourceNames, nearest, published
from mig.catalog import MODELS
from mig.migmanager import PREFIX
from mig.offers import Offer, rounded_up, short_name
from mig.placement.preference import parse_preference
from mig.placement.request import RequestError
from mig.pods import Container, container_label, read_container, resources
from mig.quantity import QuantityError, parse_quantity

MAX_WARNINGS = 10  # kubectl prints each; more than this is noise
MAX_WARNING_CHARS = 256  # kube-apiserver truncates a longer admission warning
MAX_KEYS_CHECKED = 64  # annotation keys looked at (a pod may carry thousands)
_DOMAINS = ("nvidia.com/", "hami.io/", "dynmig.io/")
KNOWN_KEYS = tuple(
    sorted(
        getattr(keys, name)
        for name in dir(keys)
        if name.isupper()
        and isinstance(getattr(keys, name), str)
        and getattr(keys, name).startswith(_DOMAINS)
    )
)


def bounded(warnings: Iterable[str]) -> tuple[str, ...]:
    """At most MAX_WARNINGS warnings of at most MAX_WARNING_CHARS characters each."""
    out: list[str] = []
    for w in warnings:
        if len(out) == MAX_WARNINGS:
            out[-1] = "more warnings left out"
            break
        out.append(w if len(w) <= MAX_WARNING_CHARS else w[: MAX_WARNING_CHARS - 1] + "…")
    return tuple(out)


# ---------------------------------------------------------------- annotation keys


def lookalike_keys(annotations: Mapping[str, Any]) -> list[str]:
    """Annotation keys one or two letters from a key dynmig or HAMi reads (each with the nearest)."""
    out = []
    for key in list(annotations)[:MAX_KEYS_CHECKED]:
        text = str(key)[:128]
        if text in KNOWN_KEYS:
            continue
        close = nearest(text, KNOWN_KEYS, n=1, cutoff=0.85)
        if close:
            out.append(
                f"annotation {text!r} is not one dynmig or HAMi reads, so it has no effect; "
                f"did you mean {close[0]!r}?"
            )
    return out


# ---------------------------------------------------------------- resource names


def resource_lookalikes(listed: list[Container], names: ResourceNames) -> list[str]:
    """Resource names one or two letters from one dynmig or HAMi reads (`nvidia.com/gpumemory`): they
    ask for something no node offers, and nothing of what was meant."""
    known = (names.count, names.memory, names.memory_percentage, names.cores)
    seen: dict[str, str] = {}
    for key, i, c in listed:
        for kind in ("limits", "requests"):
            for name in list(resources(c, kind))[:MAX_KEYS_CHECKED]:
                text = str(name)[:128]
                if len(seen) < MAX_KEYS_CHECKED and text not in known and not text.startswith(PREFIX):
                    seen.setdefault(text, container_label(key, i, c))
    out = []
    for text, label in seen.items():
        close = nearest(text, known, n=1, cutoff=0.85)
        if close:
            out.append(
                f"container {label}: resource {text!r} is not one dynmig or HAMi reads, so no node offers it "
                f"and no GPU is reserved for it; did you mean {close[0]!r}?"
            )
    return out


# ---------------------------------------------------------------- gpumem-percentage


def whole_gpu_percentages(gpu: list[Container], names: ResourceNames, offers: Iterable[Offer]) -> list[str]:
    """A `gpumem-percentage` just above a smaller allowed profile's MiB on some model (50 % of an
    A100-40GB is 20,480 MiB, above the 3g.20gb's 20,096): it gets the next profile up, often a whole
    GPU, where one or two percent less would have fit."""
    out = []
    for key, i, c in gpu:
        try:
            ask = read_container(key, i, c, names)
        except RequestError:
            continue  # refused elsewhere, with its own message
        if ask.devices and ask.memory_mib is None and ask.memory_percent:
            hits = [h for o in offers if (h := _rounded_up(ask.memory_percent, o))]
            if hits:
                also = sorted({short_name(o.model) for o in offers if _rounded_up(ask.memory_percent, o)})[
                    1:4
                ]
                more = f"; the same on {', '.join(also)}" if also else ""
                out.append(
                    f"container {container_label(key, i, c)}: {names.memory_percentage} {hits[0]}{more}"
                )
    return out


def _rounded_up(percent: int, offer: Offer) -> str:
    """Why `percent` of this model rounds up past a smaller profile ("" when it does not)."""
    hit = rounded_up(percent, offer)
    if hit is None:
        return ""
    (name, mib), whole = hit.under, "a whole GPU, " if hit.whole else ""
    return (
        f"{percent} is {hit.need} MiB on {short_name(offer.model)}, just above a {name} ({mib} MiB), so it "
        f"gets {whole}a {hit.got[0]}; write {hit.fits} for a {name}"
    )


# ---------------------------------------------------------------- preference


def _models_in(fleet: Iterable[str]) -> list[Any]:
    names = set(fleet)
    return [m for m in MODELS if not names or any(n in m.nvml_names for n in names)]


def unmeetable_preference(value: str, allowlist: Allowlist, fleet: Iterable[str]) -> list[str]:
    """Preference entries no allowed profile of any model in the fleet has (all catalog models when
    the fleet is not known yet). Entries no allowlist entry has at all are denied elsewhere."""
    offered = {r.label for model in _models_in(fleet) for r in published(allowlist, model)}
    keys_offered = {p.split(".", 1)[0] for p in offered}
    missing = [e for e in parse_preference(value) if e not in offered and e not in keys_offered]
    if not missing:
        return []
    where = "the fleet's GPU models" if set(fleet) else "any GPU model"
    return [
        f"annotation {keys.PROFILE_PREFERENCE}: {', '.join(missing)[:80]} is allowed on no profile of "
        f"{where}, so it is ignored and the pod gets the smallest allowed profile that fits; "
        f"offered: {', '.join(sorted(offered))[:100] or 'none'}"
    ]


# ---------------------------------------------------------------- gpumem


def _raw_memory(container: Mapping[str, Any], names: ResourceNames) -> str | None:
    for kind in ("limits", "requests"):
        value = resources(container, kind).get(names.memory)
        if value is not None:
            return str(value)[:64]
    return None


def _mib(raw: str) -> int | None:
    try:
        return parse_quantity(raw).as_int64()
    except QuantityError:
        return None


def whole_gpu_memory(key: str, i: int, container: Mapping[str, Any], names: ResourceNames) -> list[str]:
    """`gpumem: 0` (without a percentage) asks for a whole GPU: the largest profile of its model."""
    raw = _raw_memory(container, names)
    if raw is None or _mib(raw) != 0:
        return []
    if any(names.memory_percentage in resources(container, k) for k in ("limits", "requests")):
        return []
    return [
        f'container {container_label(key, i, container)}: {names.memory}: "0" means a whole GPU (the '
        f"largest allowed profile, e.g. 7g.40gb on an A100 40GB); write the MiB the container needs"
    ]


def pod_warnings(
    gpu: list[tuple[str, int, Mapping[str, Any]]],
    names: ResourceNames,
    allowlist: Allowlist,
    fleet: Callable[[], Iterable[str]],
    annotations: Mapping[str, Any],
) -> list[str]:
    """Every warning about a GPU pod's request (unbounded: `bounded` caps them)."""
    out = lookalike_keys(annotations)
    value = annotations.get(keys.PROFILE_PREFERENCE)
    if isinstance(value, str):
        out.extend(unmeetable_preference(value, allowlist, list(fleet())))
    for key, i, c in gpu:
        out.extend(whole_gpu_memory(key, i, c, names))
    return out
