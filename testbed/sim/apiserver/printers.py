"""The columns kube-apiserver's table printers give `kubectl get` (pkg/printers/internalversion),
for the kinds where kubectl users read them: pods, nodes, namespaces, events, jobs, the RBAC
kinds, ResourceClaims and ResourceSlices (printResourceClaim, resourceClaimState,
printResourceSlice; other kinds, DeviceClass and ResourceClaimTemplate among them, get NAME and AGE).

A column is (name, type, priority, cell function); priority 1 columns show with `-o wide` only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sim.apiserver import events
from sim.apiserver.resources import ResourceType
from sim.apiserver.selectors import selector_string

Column = tuple[str, str, int, Callable[[dict[str, Any]], Any]]


def age(ts: str | None) -> str:
    """A duration as kubectl prints it (45s, 3m, 5h, 2d); `ts` is RFC 3339, fractions allowed."""
    if not ts or not isinstance(ts, str):
        return "<unknown>"
    try:
        when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    if when.tzinfo is None:
        return "<unknown>"
    secs = int(time.time() - when.timestamp())
    if secs < 120:
        return f"{max(secs, 0)}s"
    if secs < 7200:
        return f"{secs // 60}m"
    if secs < 172800:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def _status(o: dict[str, Any]) -> dict[str, Any]:
    s = o.get("status")
    return s if isinstance(s, dict) else {}


def pod_status(pod: dict[str, Any]) -> str:
    """The STATUS column: the phase, or what a container waits on or ended with, or Terminating."""
    status = _status(pod)
    reason = status.get("reason") or status.get("phase") or "Pending"
    inits = status.get("initContainerStatuses") or []
    init_total = len((pod.get("spec") or {}).get("initContainers") or [])
    for i, c in enumerate(inits):
        state = c.get("state") or {}
        done = state.get("terminated") or {}
        if done and done.get("exitCode") == 0:
            continue
        if done:
            reason = "Init:" + (done.get("reason") or f"ExitCode:{done.get('exitCode')}")
        elif (state.get("waiting") or {}).get("reason", "PodInitializing") != "PodInitializing":
            reason = "Init:" + state["waiting"]["reason"]
        else:
            reason = f"Init:{i}/{init_total}"
        break
    else:
        running = False
        for c in reversed(status.get("containerStatuses") or []):
            state = c.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif state.get("terminated"):
                t = state["terminated"]
                reason = t.get("reason") or (
                    f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode', 0)}"
                )
            elif state.get("running") and c.get("ready"):
                running = True
        if reason == "Completed" and running:
            reason = "Running"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod_ready(pod: dict[str, Any]) -> str:
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(
        1
        for c in _status(pod).get("containerStatuses") or []
        if c.get("ready") and (c.get("state") or {}).get("running")
    )
    return f"{ready}/{total}"


def _node_status(node: dict[str, Any]) -> str:
    conds = {c.get("type"): c.get("status") for c in _status(node).get("conditions") or []}
    state = "Ready" if conds.get("Ready") == "True" else "NotReady"
    return state + (",SchedulingDisabled" if (node.get("spec") or {}).get("unschedulable") else "")


def _node_roles(node: dict[str, Any]) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = sorted(
        k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k
    )
    return ",".join(r for r in roles if r) or "<none>"


def _name(o: dict[str, Any]) -> str:
    return o["metadata"]["name"]


def _age(o: dict[str, Any]) -> str:
    return age(o["metadata"].get("creationTimestamp"))


def _node_info(node: dict[str, Any], key: str) -> str:
    return str((_status(node).get("nodeInfo") or {}).get(key, ""))


def _node_address(kind: str) -> Callable[[dict[str, Any]], str]:
    def cell(node: dict[str, Any]) -> str:
        for address in _status(node).get("addresses") or []:
            if isinstance(address, dict) and address.get("type") == kind:
                return str(address.get("address", ""))
        return "<none>"

    return cell


def _count(where: str, key: str) -> Callable[[dict[str, Any]], int]:
    def cell(o: dict[str, Any]) -> int:
        value = (o.get(where) or {}).get(key, 0)
        return value if isinstance(value, int) else 0

    return cell


def _template_cells(o: dict[str, Any], key: str) -> str:
    template = ((o.get("spec") or {}).get("template") or {}).get("spec") or {}
    return ",".join(str(c.get(key, "")) for c in template.get("containers") or [] if isinstance(c, dict))


_WORKLOAD_WIDE: list[Column] = [
    ("Containers", "string", 1, lambda o: _template_cells(o, "name")),
    ("Images", "string", 1, lambda o: _template_cells(o, "image")),
    ("Selector", "string", 1, lambda o: selector_string((o.get("spec") or {}).get("selector")) or "<none>"),
]
_DEPLOYMENT_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    (
        "Ready",
        "string",
        0,
        lambda o: f"{_count('status', 'readyReplicas')(o)}/{(o.get('spec') or {}).get('replicas', 1)}",
    ),
    ("Up-to-date", "integer", 0, _count("status", "updatedReplicas")),
    ("Available", "integer", 0, _count("status", "availableReplicas")),
    ("Age", "string", 0, _age),
    *_WORKLOAD_WIDE,
]


_REPLICASET_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Desired", "integer", 0, lambda o: _replicas(o)),
    ("Current", "integer", 0, _count("status", "replicas")),
    ("Ready", "integer", 0, _count("status", "readyReplicas")),
    ("Age", "string", 0, _age),
    *_WORKLOAD_WIDE,
]


def _replicas(o: dict[str, Any]) -> int:
    value = (o.get("spec") or {}).get("replicas", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _node_selector(o: dict[str, Any]) -> str:
    template = ((o.get("spec") or {}).get("template") or {}).get("spec") or {}
    chosen = template.get("nodeSelector") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(chosen.items())) or "<none>"


_DAEMONSET_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Desired", "integer", 0, _count("status", "desiredNumberScheduled")),
    ("Current", "integer", 0, _count("status", "currentNumberScheduled")),
    ("Ready", "integer", 0, _count("status", "numberReady")),
    ("Up-to-date", "integer", 0, _count("status", "updatedNumberScheduled")),
    ("Available", "integer", 0, _count("status", "numberAvailable")),
    ("Node Selector", "string", 0, _node_selector),
    ("Age", "string", 0, _age),
    *_WORKLOAD_WIDE,
]


def columns(rt: ResourceType) -> list[Column]:
    if rt.key == ("", "pods"):
        return [
            ("Name", "string", 0, _name),
            ("Ready", "string", 0, _pod_ready),
            ("Status", "string", 0, pod_status),
            (
                "Restarts",
                "string",
                0,
                lambda o: str(
                    sum(int(c.get("restartCount") or 0) for c in _status(o).get("containerStatuses") or [])
                ),
            ),
            ("Age", "string", 0, _age),
            ("IP", "string", 1, lambda o: _status(o).get("podIP") or "<none>"),
            ("Node", "string", 1, lambda o: (o.get("spec") or {}).get("nodeName") or "<none>"),
            ("Nominated Node", "string", 1, lambda o: _status(o).get("nominatedNodeName") or "<none>"),
            ("Readiness Gates", "string", 1, lambda o: "<none>"),
        ]
    if rt.key == ("", "nodes"):
        return [
            ("Name", "string", 0, _name),
            ("Status", "string", 0, _node_status),
            ("Roles", "string", 0, _node_roles),
            ("Age", "string", 0, _age),
            ("Version", "string", 0, lambda o: _node_info(o, "kubeletVersion")),
            ("Internal-IP", "string", 1, _node_address("InternalIP")),
            ("External-IP", "string", 1, _node_address("ExternalIP")),
            ("OS-Image", "string", 1, lambda o: _node_info(o, "osImage")),
            ("Kernel-Version", "string", 1, lambda o: _node_info(o, "kernelVersion")),
            ("Container-Runtime", "string", 1, lambda o: _node_info(o, "containerRuntimeVersion")),
        ]
    if rt.key == ("coordination.k8s.io", "leases"):
        return [
            ("Name", "string", 0, _name),
            ("Holder", "string", 0, lambda o: str((o.get("spec") or {}).get("holderIdentity") or "")),
            ("Age", "string", 0, _age),
        ]
    if rt.key == ("apps", "deployments"):
        return _DEPLOYMENT_COLUMNS
    if rt.key == ("apps", "replicasets"):
        return _REPLICASET_COLUMNS
    if rt.key == ("apps", "daemonsets"):
        return _DAEMONSET_COLUMNS
    if rt.key == ("", "namespaces"):
        return [
            ("Name", "string", 0, _name),
            ("Status", "string", 0, lambda o: _status(o).get("phase", "")),
            ("Age", "string", 0, _age),
        ]
    if rt.key == ("batch", "jobs"):
        return _JOB_COLUMNS
    if rt.key == ("networking.k8s.io", "networkpolicies"):
        return [
            ("Name", "string", 0, _name),
            ("Pod-Selector", "string", 0, _pod_selector),
            ("Age", "string", 0, _age),
        ]
    if rt.key == ("resource.k8s.io", "resourceclaims"):
        return [("Name", "string", 0, _name), ("State", "string", 0, claim_state), ("Age", "string", 0, _age)]
    if rt.key == ("resource.k8s.io", "resourceslices"):
        return [
            ("Name", "string", 0, _name),
            ("Node", "string", 0, lambda o: _spec_text(o, "nodeName")),
            ("Driver", "string", 0, lambda o: _spec_text(o, "driver")),
            ("Pool", "string", 0, lambda o: str(((o.get("spec") or {}).get("pool") or {}).get("name") or "")),
            ("Age", "string", 0, _age),
        ]
    if rt.group == "rbac.authorization.k8s.io":
        if rt.kind in ("ClusterRole", "Role"):
            return [("Name", "string", 0, _name), ("Created At", "date", 0, _created_at)]
        return _BINDING_COLUMNS
    if rt.storage_key == ("", "events"):
        # One printer for both APIs, as in kube-apiserver: it reads the stored (core) form.
        core = events.to_core if rt.stored_as else (lambda o: o)
        return [(n, t, p, _on(core, f)) for n, t, p, f in _EVENT_COLUMNS]
    return [("Name", "string", 0, _name), ("Age", "string", 0, _age)]


def claim_state(o: dict[str, Any]) -> str:
    """printResourceClaim's STATE: deleted, then pending or allocated(,reserved)."""
    states = []
    deleted = bool((o.get("metadata") or {}).get("deletionTimestamp"))
    if deleted:
        states.append("deleted")
    if _status(o).get("allocation") is None:
        if not deleted:
            states.append("pending")
    else:
        states.append("allocated")
        if _status(o).get("reservedFor"):
            states.append("reserved")
    return ",".join(states)


def _spec_text(o: dict[str, Any], key: str) -> str:
    value = (o.get("spec") or {}).get(key)
    return value if isinstance(value, str) else ""


def _pod_selector(o: dict[str, Any]) -> str:
    """metav1.FormatLabelSelector of spec.podSelector: `<none>` for an empty one."""
    return selector_string((o.get("spec") or {}).get("podSelector")) or "<none>"


def _created_at(o: dict[str, Any]) -> str:
    return str(o["metadata"].get("creationTimestamp") or "")


def _subjects(kind: str) -> Callable[[dict[str, Any]], str]:
    def cell(o: dict[str, Any]) -> str:
        found = []
        for s in o.get("subjects") or []:
            if isinstance(s, dict) and s.get("kind") == kind:
                ns = f"{s.get('namespace', '')}/" if kind == "ServiceAccount" else ""
                found.append(f"{ns}{s.get('name', '')}")
        return ", ".join(found)

    return cell


def _role_ref(o: dict[str, Any]) -> str:
    ref = o.get("roleRef") if isinstance(o.get("roleRef"), dict) else {}
    return f"{ref.get('kind', '')}/{ref.get('name', '')}"


_BINDING_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Role", "string", 0, _role_ref),
    ("Age", "string", 0, _age),
    ("Users", "string", 1, _subjects("User")),
    ("Groups", "string", 1, _subjects("Group")),
    ("ServiceAccounts", "string", 1, _subjects("ServiceAccount")),
]


def _job_status(o: dict[str, Any]) -> str:
    """printJob's STATUS: the condition that ends or holds it, else Running."""
    conds = {
        c.get("type"): c.get("status") for c in _status(o).get("conditions") or [] if isinstance(c, dict)
    }
    for kind in ("Complete", "Failed"):
        if conds.get(kind) == "True":
            return kind
    if (o.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    for kind in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if conds.get(kind) == "True":
            return kind
    return "Running"


def _job_completions(o: dict[str, Any]) -> str:
    spec = o.get("spec") if isinstance(o.get("spec"), dict) else {}
    done = int(_status(o).get("succeeded") or 0)
    if spec.get("completions") is not None:
        return f"{done}/{spec['completions']}"
    parallelism = int(spec.get("parallelism") or 0)
    return f"{done}/1 of {parallelism}" if parallelism > 1 else f"{done}/1"


def _job_duration(o: dict[str, Any]) -> str:
    status = _status(o)
    start = status.get("startTime")
    if not start:
        return ""
    end = status.get("completionTime")
    if not end:
        return age(start)
    try:
        begun = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        ended = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    secs = int((ended - begun).total_seconds())
    return f"{secs}s" if secs < 120 else f"{secs // 60}m"


def _job_images(key: str) -> Callable[[dict[str, Any]], str]:
    def cell(o: dict[str, Any]) -> str:
        spec = ((o.get("spec") or {}).get("template") or {}).get("spec") or {}
        return ",".join(str(c.get(key, "")) for c in spec.get("containers") or [] if isinstance(c, dict))

    return cell


_JOB_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Status", "string", 0, _job_status),
    ("Completions", "string", 0, _job_completions),
    ("Duration", "string", 0, _job_duration),
    ("Age", "string", 0, _age),
    ("Containers", "string", 1, _job_images("name")),
    ("Images", "string", 1, _job_images("image")),
]


def _on(
    convert: Callable[[dict[str, Any]], dict[str, Any]], cell: Callable[[dict[str, Any]], Any]
) -> Callable:
    return lambda o: cell(convert(o))


def _first_seen(o: dict[str, Any]) -> str:
    return age(o.get("firstTimestamp") or o.get("eventTime"))


def _last_seen(o: dict[str, Any]) -> str:
    """kube-apiserver's printEvent: the series' last observation, else lastTimestamp, else when it
    was first seen."""
    series = o.get("series") if isinstance(o.get("series"), dict) else None
    if series:
        return age(series.get("lastObservedTime"))
    return age(o["lastTimestamp"]) if o.get("lastTimestamp") else _first_seen(o)


def _event_count(o: dict[str, Any]) -> int:
    series = o.get("series") if isinstance(o.get("series"), dict) else None
    if series:
        return int(series.get("count") or 0)
    return int(o.get("count") or 0) or 1  # a singleton event of the new API has no count


def _event_object(o: dict[str, Any]) -> str:
    ref = o.get("involvedObject") or {}
    kind = str(ref.get("kind", "")).lower()
    return f"{kind}/{ref['name']}" if ref.get("name") else kind


def _event_source(o: dict[str, Any]) -> str:
    source = o.get("source") or {}
    component = source.get("component") or o.get("reportingComponent") or ""
    instance = source.get("host") or o.get("reportingInstance") or ""
    return f"{component}, {instance}" if instance else component


_EVENT_COLUMNS: list[Column] = [
    ("Last Seen", "string", 0, _last_seen),
    ("Type", "string", 0, lambda o: o.get("type") or ""),
    ("Reason", "string", 0, lambda o: o.get("reason") or ""),
    ("Object", "string", 0, _event_object),
    ("Subobject", "string", 1, lambda o: (o.get("involvedObject") or {}).get("fieldPath") or ""),
    ("Source", "string", 1, _event_source),
    ("Message", "string", 0, lambda o: str(o.get("message") or "").strip()),
    ("First Seen", "string", 1, _first_seen),
    ("Count", "integer", 1, _event_count),
    ("Name", "string", 1, _name),
]
