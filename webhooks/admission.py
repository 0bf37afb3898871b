"""The admission decisions, free of HTTP: a Review in, a Decision out.

`/mutate` (pods): route GPU pods to dynmig's scheduler, complete their request, refuse what MIG
cannot serve. `/validate` (pods and dynmig's device-config ConfigMap): guard the controller-owned
reservation annotation, check the preference annotation and the allowlist a policy author submits.

The reservation guard runs on both routes and compares the old and new object, so it holds on
CREATE and UPDATE whatever patch type the client used (JSON, merge, strategic merge, full update):
by the time admission runs the apiserver has applied the patch and we see its result.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mig.allowlist import (
    DEVICE_CONFIG_KEY,
    DEVICE_CONFIG_LABEL,
    ERROR,
    INFO,
    Allowlist,
    DeviceConfig,
    ResourceNames,
    check_text,
)
from mig.annotations import MIG_ALLOCATIONS, PROFILE_PREFERENCE, WEBHOOK_IGNORE_LABEL
from mig.migmanager import Translation, translate
from mig.offers import Offer, merged
from mig.placement.preference import parse_preference, unknown_entries
from mig.placement.request import RequestError, annotation_problem
from mig.pods import (
    DEFAULT_SCHEDULER,
    annotations_of,
    container_label,
    containers,
    names_gpu,
    read_container,
    resources,
)
from webhooks.intent import (
    bounded,
    pod_warnings,
    resource_lookalikes,
    whole_gpu_percentages,
)
from webhooks.objects import ConfigMap, ObjectError, Pod, check
from webhooks.review import Decision, Review, pointer

DEFAULT_SCHEDULER_NAMES = ("", "default-scheduler")
IGNORE = "ignore"


@dataclass(frozen=True)
class AdmissionPolicy:
    """What the decisions depend on; `device_config` is called per request (the file may reload)."""

    device_config: Callable[[], DeviceConfig]
    scheduler_name: str = DEFAULT_SCHEDULER
    privileged_users: frozenset[str] = frozenset()
    config_label: str = DEVICE_CONFIG_LABEL
    config_key: str = DEVICE_CONFIG_KEY
    ignored_namespaces: Callable[[str], bool] = lambda namespace: False
    # NVML names of the fleet's GPUs (for warnings about preferences no model there can meet); none
    # known: every catalog model counts
    fleet_models: Callable[[], Iterable[str]] = lambda: ()
    # each GPU type as the fleet's nodes publish it (total MiB, allowed profiles and their MiB); none
    # known: the catalog's figures for the allowlist's profiles
    fleet_offers: Callable[[], Iterable[Offer]] = lambda: ()
    # `nvidia.com/mig-*` names the chart's DeviceClasses map for DRA nodes (DRA extended resources):
    # left to kube-scheduler, not translated
    dra_resources: frozenset[str] = frozenset()


# ---------------------------------------------------------------- helpers on pod JSON


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = (obj or {}).get("metadata") or {}
    value = meta.get("labels") if isinstance(meta, dict) else None
    return value if isinstance(value, dict) else {}


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return annotations_of(obj or {})


def _bad_request(key: str, i: int, container: Mapping[str, Any], names: ResourceNames) -> str:
    """Why the container's GPU resources cannot be read (quantities, ranges), or ""."""
    try:
        read_container(key, i, container, names)
    except RequestError as error:
        return str(error)
    return ""


def _privileged(container: Mapping[str, Any]) -> bool:
    ctx = container.get("securityContext") or {}
    return isinstance(ctx, dict) and ctx.get("privileged") is True


def _is_pod(review: Review) -> bool:
    return review.resource == "pods" or review.kind == "Pod"


# ---------------------------------------------------------------- shared pod rules


def guard_reservation(review: Review, policy: AdmissionPolicy) -> Decision | None:
    """Only the scheduler and the device plugin may create, change or remove the reservation."""
    if review.operation not in ("CREATE", "UPDATE") or review.object is None:
        return None
    new = _annotations(review.object).get(MIG_ALLOCATIONS)
    old = _annotations(review.old_object).get(MIG_ALLOCATIONS) if review.operation == "UPDATE" else None
    if new == old or review.username in policy.privileged_users:
        return None
    verb = "set" if old is None else ("remove" if new is None else "change")
    return Decision.deny(
        f"annotation {MIG_ALLOCATIONS} is controller-owned: only the dynmig scheduler and device plugin "
        f"may write it, and {review.username or 'an anonymous user'} tried to {verb} it. "
        f"Remove {MIG_ALLOCATIONS} from your manifest or patch; dynmig sets it when it schedules the pod."
    )


def _allowed_values(allowlist: Allowlist) -> list[str]:
    names = sorted(allowlist.all_profiles())
    keys = sorted({n.split(".", 1)[0] for n in names}, key=lambda k: (len(k), k))
    return keys + names


def check_annotation_sizes(review: Review, policy: AdmissionPolicy) -> Decision | None:
    """The scheduling annotations dynmig reads are bounded (a preference is a few entries, not 10^5)."""
    if review.object is None or review.operation not in ("CREATE", "UPDATE"):
        return None
    problem = annotation_problem(_annotations(review.object))
    return Decision.deny(problem, code=400) if problem else None


def check_preference(review: Review, policy: AdmissionPolicy) -> Decision | None:
    """A preference must name at least one profile and only profiles some allowlist entry offers."""
    if review.object is None or review.operation not in ("CREATE", "UPDATE"):
        return None
    value = _annotations(review.object).get(PROFILE_PREFERENCE)
    if value is None or value == _annotations(review.old_object).get(PROFILE_PREFERENCE):
        return None
    allowlist = policy.device_config().allowlist
    entries = parse_preference(value if isinstance(value, str) else "")
    if not entries:
        return Decision.deny(
            f"annotation {PROFILE_PREFERENCE} is empty; list profiles or slice keys such "
            f"as '3g,4g' or remove the annotation. Allowed values: {_allowed_text(allowlist)}"
        )
    unknown = unknown_entries(entries, allowlist.all_profiles())
    if unknown:
        return Decision.deny(
            f"annotation {PROFILE_PREFERENCE}: {', '.join(repr(u) for u in unknown)} "
            f"matches no profile in the MIG allowlist. Allowed values: {_allowed_text(allowlist)}"
        )
    return None


def _allowed_text(allowlist: Allowlist) -> str:
    """The allowed values as a refusal lists them (built only for a refusal)."""
    return ", ".join(_allowed_values(allowlist)) or "(the allowlist is empty)"


# ---------------------------------------------------------------- /mutate


def mutate(review: Review, policy: AdmissionPolicy) -> Decision:
    """Mutating decision for a pod: schedulerName, a default device count, refusals."""
    if not _is_pod(review) or review.sub_resource or review.object is None:
        return Decision.allow(result="skipped")
    for rule in (guard_reservation, check_annotation_sizes, check_preference):
        denied = rule(review, policy)
        if denied:
            return denied
    if review.operation != "CREATE":
        return Decision.allow(result="skipped")
    pod = review.object
    if _labels(pod).get(WEBHOOK_IGNORE_LABEL) == IGNORE or policy.ignored_namespaces(review.namespace):
        return Decision.allow(f"skipped: labelled {WEBHOOK_IGNORE_LABEL}={IGNORE}", result="skipped")
    config = policy.device_config()
    names = config.resources
    if not containers(pod):
        return Decision.deny("pod has no containers; add at least one under spec.containers", code=400)
    spec = pod.get("spec") or {}
    current = spec.get("schedulerName") or ""
    if current not in DEFAULT_SCHEDULER_NAMES and current != policy.scheduler_name:
        return Decision.allow(f"pod names scheduler {current!r}; left alone", result="skipped")
    fleet = tuple(policy.fleet_offers())
    offers = merged(fleet, config.allowlist)
    moved = translate(containers(pod), _annotations(pod), names, offers, policy.dra_resources)
    if moved.refusal:
        return Decision.deny(f"{moved.refusal} (docs/migrating-from-mig-manager.md)")
    pod = translated(pod, moved, names)
    listed = containers(pod)
    gpu = [(key, i, c) for key, i, c in listed if names_gpu(c, names)]
    if not gpu:
        return Decision.allow(
            warnings=bounded([*moved.warnings, *resource_lookalikes(listed, names)]), result="skipped"
        )
    if spec.get("nodeName"):
        return Decision.deny(
            f"pod requests {names.count} but already has spec.nodeName={spec['nodeName']!r}; dynmig must "
            f"choose the node and MIG placement: remove spec.nodeName (use a nodeSelector or affinity instead)"
        )
    bad = next((why for key, i, c in gpu if (why := _bad_request(key, i, c, names))), "")
    if bad:
        return Decision.deny(
            f"{bad}; fix the container's resources (see the README's section on pod resources)"
        )
    privileged = [container_label(key, i, c) for key, i, c in listed if _privileged(c)]
    if privileged:
        return Decision.deny(
            f"container {', '.join(privileged)} is privileged in a pod that requests {names.count}: a "
            f"privileged container sees every GPU on the node, not just its MIG instance; remove "
            f"securityContext.privileged or move the GPU request to another pod"
        )
    ops = translation_ops(review.object, moved, names)
    if current != policy.scheduler_name:
        ops.append({"op": "add", "path": pointer("spec", "schedulerName"), "value": policy.scheduler_name})
    warnings = list(moved.warnings)
    for key, i, c in gpu:
        ops.extend(_default_count(key, i, c, names))
        if any(names.cores in resources(c, k) for k in ("limits", "requests")):
            warnings.append(
                f"container {container_label(key, i, c)}: {names.cores} has no effect on a MIG device; "
                f"the MIG profile fixes the compute share"
            )
    warnings += pod_warnings(gpu, names, config.allowlist, policy.fleet_models, _annotations(pod))
    warnings += whole_gpu_percentages(gpu, names, _sized(fleet, offers))
    warnings += resource_lookalikes(listed, names)
    return Decision.patched(ops, bounded(warnings))


def _sized(fleet: tuple[Offer, ...], offers: tuple[Offer, ...]) -> tuple[Offer, ...]:
    """The GPU models a pod may land on: the fleet's when known, else every model with an allowed profile."""
    return fleet or tuple(o for o in offers if o.profiles)


def translated(pod: Mapping[str, Any], moved: Translation, names: ResourceNames) -> dict[str, Any]:
    """The pod as its MIG Manager requests read in dynmig's names (a copy; `pod` is not changed)."""
    if not moved.moves:
        return dict(pod)
    out = copy.deepcopy(dict(pod))
    for m in moved.moves:
        for kind in m.kinds:
            held = out["spec"][m.field][m.index]["resources"][kind]
            del held[m.resource]
            held[names.count], held[names.memory] = str(m.devices), str(m.memory_mib)
    if moved.preference:
        meta = out.setdefault("metadata", {})
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            PROFILE_PREFERENCE: ",".join(moved.preference),
        }
    return out


def translation_ops(pod: Mapping[str, Any], moved: Translation, names: ResourceNames) -> list[dict[str, Any]]:
    """The JSON patch that makes the admitted pod read as `translated` does."""
    ops: list[dict[str, Any]] = []
    for m in moved.moves:
        for kind in m.kinds:
            base = ("spec", m.field, m.index, "resources", kind)
            ops.append({"op": "remove", "path": pointer(*base, m.resource)})
            ops.append({"op": "add", "path": pointer(*base, names.count), "value": str(m.devices)})
            ops.append({"op": "add", "path": pointer(*base, names.memory), "value": str(m.memory_mib)})
    if moved.preference:
        value = ",".join(moved.preference)
        if isinstance((pod.get("metadata") or {}).get("annotations"), dict):
            ops.append(
                {"op": "add", "path": pointer("metadata", "annotations", PROFILE_PREFERENCE), "value": value}
            )
        else:
            ops.append(
                {
                    "op": "add",
                    "path": pointer("metadata", "annotations"),
                    "value": {PROFILE_PREFERENCE: value},
                }
            )
    return ops


def _default_count(key: str, i: int, c: Mapping[str, Any], names: ResourceNames) -> list[dict[str, Any]]:
    """`nvidia.com/gpu: 1` for a container that asks only for memory (HAMi's defaultGPUNum)."""
    limits, requests = resources(c, "limits"), resources(c, "requests")
    if names.count in limits or names.count in requests:
        return []
    ops: list[dict[str, Any]] = []
    base = ("spec", key, i, "resources")
    if "resources" not in c or not isinstance(c.get("resources"), dict):
        return [{"op": "add", "path": pointer(*base), "value": {"limits": {names.count: "1"}}}]
    if "limits" in c["resources"] and isinstance(c["resources"]["limits"], dict):
        ops.append({"op": "add", "path": pointer(*base, "limits", names.count), "value": "1"})
    else:
        ops.append({"op": "add", "path": pointer(*base, "limits"), "value": {names.count: "1"}})
    if any(n in requests for n in (names.memory, names.memory_percentage)):
        ops.append({"op": "add", "path": pointer(*base, "requests", names.count), "value": "1"})
    return ops


# ---------------------------------------------------------------- /validate


def validate(review: Review, policy: AdmissionPolicy) -> Decision:
    """Validating decision: pods (reservation guard, preference) and the device-config ConfigMap."""
    if review.kind == "ConfigMap" or review.resource == "configmaps":
        return validate_device_config(review, policy)
    if not _is_pod(review) or review.object is None:
        return Decision.allow(result="skipped")
    for rule in (guard_reservation, check_annotation_sizes, check_preference):
        denied = rule(review, policy)
        if denied:
            return denied
    return Decision.allow()


def validate_device_config(review: Review, policy: AdmissionPolicy) -> Decision:
    """An allowlist with an error `dynmig policy check` reports never reaches the scheduler or the
    plugins (serve reloads its file under the same check); what only warns comes back as warnings."""
    cm = review.object
    if review.operation not in ("CREATE", "UPDATE") or cm is None:
        return Decision.allow(result="skipped")
    if str(_labels(cm).get(policy.config_label, "")).lower() != "true":
        return Decision.allow(result="skipped")
    data = cm.get("data") or {}
    source = f"configmap {review.namespace}/{review.name or (cm.get('metadata') or {}).get('name', '')}"
    text = data.get(policy.config_key) if isinstance(data, dict) else None
    if not isinstance(text, str):
        return Decision.deny(
            f"{source}: data.{policy.config_key} is missing; a ConfigMap labelled "
            f"{policy.config_label}=true carries the device config under that key"
        )
    _, issues = check_text(text)
    issues = [i for i in issues if i.severity != INFO]
    rendered = [i.render(f"{source} data.{policy.config_key}") for i in issues]
    errors = [r for r, i in zip(rendered, issues, strict=True) if i.severity == ERROR]
    if errors:
        return Decision.deny("\n".join(_first(errors, "errors")))
    return Decision.allow(warnings=tuple(_first(rendered, "warnings")))


MAX_LISTED = 20


def _first(lines: list[str], what: str) -> list[str]:
    """At most MAX_LISTED lines of at most 1 KiB each, then how many more: a reply never grows with the input."""
    shown = [line if len(line) <= 1024 else line[:1024] + "…" for line in lines[:MAX_LISTED]]
    return shown + ([f"and {len(lines) - MAX_LISTED} more {what}"] if len(lines) > MAX_LISTED else [])


def object_problem(review: Review) -> str:
    """Why the object (or old object) has fields of the wrong type or size for its kind, or ""."""
    model = (
        Pod
        if _is_pod(review)
        else ConfigMap
        if (review.kind == "ConfigMap" or review.resource == "configmaps")
        else None
    )
    if model is None:
        return ""
    try:
        check(model, review.object or {}, "request.object")
        check(model, review.old_object or {}, "request.oldObject")
    except ObjectError as error:
        return str(error)
    return ""


def decide(route: str, review: Review, policy: AdmissionPolicy) -> Decision:
    """The decision for one review; an object with wrong types is denied (400) naming the JSON path."""
    problem = object_problem(review)
    if problem:
        return Decision.deny(
            f"{problem}; this is not a valid {review.kind or 'object'}", code=400, result="invalid"
        )
    return mutate(review, policy) if route == "mutate" else validate(review, policy)
