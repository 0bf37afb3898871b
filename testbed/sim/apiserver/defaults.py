"""A new Pod's defaults, as kube-apiserver fills them in before anything else sees the pod.

kube-apiserver defaults a pod when it decodes it, before mutating admission, and again after each
mutating webhook's patch (so a webhook sees `schedulerName: default-scheduler`, and a limit a
webhook adds gets its request too). What is filled in (k8s.io/kubernetes pkg/apis/core/v1
defaults, and the admission plugins that run before webhooks):
- a container with limits but no request for a resource gets the limit as its request (pods only,
  not pod templates);
- spec: dnsPolicy ClusterFirst, restartPolicy Always, schedulerName default-scheduler,
  terminationGracePeriodSeconds 30, securityContext {}, enableServiceLinks true;
- each container: terminationMessagePath /dev/termination-log, terminationMessagePolicy File,
  imagePullPolicy (Always for an untagged or `:latest` image, else IfNotPresent), resources {},
  protocol TCP on each port;
- ServiceAccount admission: serviceAccountName (and the deprecated serviceAccount) `default`;
- Priority admission: priority 0, preemptionPolicy PreemptLowerPriority;
- DefaultTolerationSeconds admission: tolerate node.kubernetes.io/not-ready and unreachable
  (NoExecute) for 300 s unless the pod tolerates them already;
- status.qosClass from cpu and memory requests and limits (Guaranteed, Burstable, BestEffort).

Deployments, ReplicaSets and DaemonSets get their apps/v1 defaults (rolling update parameters,
revision history, progress deadline, replicas) and their pod template the PodSpec defaults above (not the
requests, service account, priority or tolerations: those are a pod's).

Not done: the service account token volume and its mounts.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from sim.apiserver import quantity

_CONTAINER_LISTS = ("initContainers", "containers")
_NOT_READY = "node.kubernetes.io/not-ready"
_UNREACHABLE = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300


def pod(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` (a Pod) with its defaults filled in, in place; idempotent; odd shapes are left alone
    for validation to refuse."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    for key in _CONTAINER_LISTS:
        for container in _dicts(spec.get(key)):
            _requests_from_limits(container)
    pod_spec(spec)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    _tolerations(spec)
    return obj


def pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The defaults of a PodSpec, in a pod or a pod template, in place."""
    for key in _CONTAINER_LISTS:
        for container in _dicts(spec.get(key)):
            _container(container)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    return spec


def workload(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """A Deployment's, ReplicaSet's or DaemonSet's defaults (apps/v1), its pod template's included,
    in place (a ReplicaSet has no revision history or strategy: only replicas)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    template = spec.get("template")
    if isinstance(template, dict):
        template.setdefault("metadata", {})
        if isinstance(template.get("spec"), dict):
            pod_spec(template["spec"])
    if kind == "ReplicaSet":
        spec.setdefault("replicas", 1)
        return obj
    spec.setdefault("revisionHistoryLimit", 10)
    if kind == "Deployment":
        spec.setdefault("replicas", 1)
        spec.setdefault("progressDeadlineSeconds", 600)
        _rolling(spec, "strategy", {"maxUnavailable": "25%", "maxSurge": "25%"})
    elif kind == "DaemonSet":
        _rolling(spec, "updateStrategy", {"maxUnavailable": 1, "maxSurge": 0})
    return obj


def _rolling(spec: dict[str, Any], key: str, parameters: dict[str, Any]) -> None:
    strategy = spec.setdefault(key, {})
    if not isinstance(strategy, dict):
        return
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        if isinstance(rolling, dict):
            for name, value in parameters.items():
                rolling.setdefault(name, value)


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _requests_from_limits(container: dict[str, Any]) -> None:
    resources = container.get("resources")
    if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
        return
    requests = resources.setdefault("requests", {})
    if isinstance(requests, dict):
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)


def _container(container: dict[str, Any]) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    image = container.get("image")
    if isinstance(image, str) and image:
        container.setdefault("imagePullPolicy", _pull_policy(image))
    for port in _dicts(container.get("ports")):
        port.setdefault("protocol", "TCP")


def _pull_policy(image: str) -> str:
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _tolerations(spec: dict[str, Any]) -> None:
    tolerations = spec.get("tolerations")
    if tolerations is None:
        tolerations = spec["tolerations"] = []
    if not isinstance(tolerations, list):
        return
    for key in (_NOT_READY, _UNREACHABLE):
        if not any(_tolerates(t, key) for t in _dicts(tolerations)):
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )


def _tolerates(toleration: dict[str, Any], key: str) -> bool:
    """Whether a toleration already covers the NoExecute taint `key` (the plugin then adds none)."""
    if toleration.get("effect") not in (None, "", "NoExecute"):
        return False
    return toleration.get("key") in (None, "", key) and (
        toleration.get("key") == key or toleration.get("operator") == "Exists"
    )


def qos_class(obj: dict[str, Any]) -> str:
    """The pod's QoS class: cpu and memory requests and limits above zero, summed over all its
    containers; Guaranteed when every container limits both and the sums of requests equal those
    of limits, BestEffort when nothing is asked or limited, else Burstable."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    for key in _CONTAINER_LISTS:
        for container in _dicts((spec or {}).get(key)):
            resources = container.get("resources") if isinstance(container.get("resources"), dict) else {}
            for name, value in _compute(resources.get("requests")).items():
                requests[name] = requests.get(name, Fraction(0)) + value
            capped = _compute(resources.get("limits"))
            for name, value in capped.items():
                limits[name] = limits.get(name, Fraction(0)) + value
            if set(capped) != {"cpu", "memory"}:
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    same = all(limits.get(name) == value for name, value in requests.items())
    return "Guaranteed" if guaranteed and same and len(requests) == len(limits) else "Burstable"


def _compute(resources: Any) -> dict[str, Fraction]:
    """The cpu and memory entries of a resource map that are above zero, as numbers."""
    if not isinstance(resources, dict):
        return {}
    out: dict[str, Fraction] = {}
    for name in ("cpu", "memory"):
        try:
            value = quantity.parse(resources[name])[0] if name in resources else Fraction(0)
        except (quantity.QuantityError, TypeError, ValueError):
            continue
        if value > 0:
            out[name] = value
    return out
