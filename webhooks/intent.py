"""Intent never ignored in silence: what admission says back about a pod's GPU request.

Warnings (the AdmissionReview `warnings` field, shown by kubectl as `Warning: ...`) for annotation
keys that look like dynmig's or HAMi's but are not, for a profile preference no allowed profile can
meet, and for `nvidia.com/gpumem: "0"` (a whole GPU). A refusal for a gpumem written in bytes
(`8Gi`), naming the unit. Warnings are bounded in count and length whatever the pod carries.

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
from mig.placement.preference import parse_preference
from mig.placement.request import INT32_MAX, bytes_in_mib, counts_mib
from mig.pods import container_label, resources
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


def memory_unit_problem(key: str, i: int, container: Mapping[str, Any], names: ResourceNames) -> str:
    """A gpumem beyond any MiB count, most likely written in bytes (`8Gi`): the refusal names the
    unit and what to write; "" otherwise."""
    raw = _raw_memory(container, names)
    value = _mib(raw) if raw is not None else None
    said = counts_mib(names.memory, str(raw), value) if value is not None else ""
    if not said:
        return ""
    in_mib = bytes_in_mib(value or 0)
    return (
        f"container {container_label(key, i, container)}: {said} "
        f'(write {names.memory}: "{in_mib}"; at most {INT32_MAX})'
    )


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
