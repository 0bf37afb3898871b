"""What the Deployment controller does in one pass, as a pure function of a Deployment and the
ReplicaSets it controls (kube-controller-manager's pkg/controller/deployment, the parts a user can
tell): the plan of ReplicaSet writes, the events and the Deployment's status.

- A ReplicaSet per pod template, named `<deployment>-<pod-template-hash>`; the hash is of the
  Deployment's template and labels the ReplicaSet's selector, template and so its pods. The
  ReplicaSet whose template equals the Deployment's (the hash label aside) is the new one, every
  other one is old; a rollback (`kubectl rollout undo` puts an old ReplicaSet's template back)
  makes that old one new again, with the next revision.
- Revisions: the new ReplicaSet's `deployment.kubernetes.io/revision` is one more than the highest
  old one's (an old revision it had moves to `revision-history`), and the Deployment carries it.
  The Deployment's own annotations (`kubernetes.io/change-cause`) are copied onto the new one.
- RollingUpdate: the new ReplicaSet grows while all ReplicaSets' replicas stay within
  `replicas + maxSurge`, old ones shrink while the available pods stay at least
  `replicas - maxUnavailable` (percentages of replicas; surge rounds up, unavailable down, and both
  0 means 1 unavailable); unhealthy old replicas go first, oldest ReplicaSets first.
- Recreate: every old ReplicaSet to 0, and the new one made and scaled up only once no old pod
  runs (terminating ones included), so two generations of a GPU pod never overlap.
- Once complete, old ReplicaSets at 0 beyond `revisionHistoryLimit` are deleted, oldest revision
  first. A paused Deployment makes no new ReplicaSet; a scale reaches its one active one (the
  new one or the newest when none is active).
- Status: replicas, updatedReplicas, readyReplicas, availableReplicas, unavailableReplicas,
  observedGeneration; conditions Available (MinimumReplicasAvailable/Unavailable) and Progressing
  (NewReplicaSetCreated, FoundNewReplicaSet, ReplicaSetUpdated, NewReplicaSetAvailable,
  ProgressDeadlineExceeded after `progressDeadlineSeconds` without progress, DeploymentPaused,
  DeploymentResumed), and ReplicaFailure while a ReplicaSet's pods are refused (the new one's
  first).
Not done: proportional scaling of a rollout in flight (a scale during a rollout goes through the
rolling rules above), pod-template-hash collisions (collisionCount), adoption of orphans.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX = "deployment.kubernetes.io/max-replicas"
HASH_LABEL = "pod-template-hash"
# annotations of a Deployment that are not copied to its ReplicaSets
_NOT_COPIED = frozenset(
    {
        "kubectl.kubernetes.io/last-applied-configuration",
        REVISION,
        REVISION_HISTORY,
        DESIRED,
        MAX,
        "deprecated.deployment.rollback.to",
    }
)
MAX_REPLICAS = 1000
_SAFE = "bcdfghjklmnpqrstvwxz2456789"  # no vowels: a hash never spells a word


@dataclass
class Plan:
    """One pass's writes: new ReplicaSets, (ReplicaSet, replicas, annotations) updates, deletions,
    the Deployment's revision annotation, ScalingReplicaSet event messages and the status."""

    create: list[dict[str, Any]] = field(default_factory=list)
    update: list[tuple[dict[str, Any], int, dict[str, str]]] = field(default_factory=list)
    delete: list[dict[str, Any]] = field(default_factory=list)
    revision: str = ""
    events: list[str] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)


def pod_template_hash(template: dict[str, Any]) -> str:
    """A short name-safe hash of a pod template (FNV-1a 32-bit of its canonical JSON, its digits
    spelled in consonants and digits, as the controller spells its hash)."""
    value = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[ord(ch) % len(_SAFE)] for ch in str(value))


def scaled(value: Any, total: int, round_up: bool, what: str) -> int:
    """An int-or-percent (maxSurge, maxUnavailable) of `total`."""
    if isinstance(value, bool):
        raise ValueError(f"{what} {value!r}: an integer or a percentage")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        share = int(value[:-1]) * total / 100
        return math.ceil(share) if round_up else math.floor(share)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise ValueError(f"{what} {str(value)[:32]!r}: an integer or a percentage such as 25%")


def replicas_of(obj: dict[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("replicas", 1)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPLICAS:
        raise ValueError(f"spec.replicas {str(value)[:32]}: the lab runs 0 to {MAX_REPLICAS} replicas")
    return value


def _rolling(deploy: dict[str, Any]) -> dict[str, Any]:
    strategy = (deploy.get("spec") or {}).get("strategy") or {}
    return (
        strategy.get("rollingUpdate") or {}
        if strategy.get("type", "RollingUpdate") == "RollingUpdate"
        else {}
    )


def is_recreate(deploy: dict[str, Any]) -> bool:
    return ((deploy.get("spec") or {}).get("strategy") or {}).get("type") == "Recreate"


def max_surge(deploy: dict[str, Any]) -> int:
    if is_recreate(deploy):
        return 0
    return scaled(_rolling(deploy).get("maxSurge", "25%"), replicas_of(deploy), True, "maxSurge")


def max_unavailable(deploy: dict[str, Any]) -> int:
    replicas = replicas_of(deploy)
    if is_recreate(deploy) or replicas == 0:
        return 0
    rolling = _rolling(deploy)
    unavailable = scaled(rolling.get("maxUnavailable", "25%"), replicas, False, "maxUnavailable")
    if unavailable == 0 and max_surge(deploy) == 0:
        unavailable = 1  # neither may be 0 with the other: the rollout could not move
    return min(unavailable, replicas)


def revision(obj: dict[str, Any]) -> int:
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(REVISION, "")
    # a revision is an int64: longer digit strings are not one (and no huge int is parsed)
    return int(text) if isinstance(text, str) and text.isdigit() and len(text) <= 18 else 0


def _semantic(value: Any) -> Any:
    """A template as the API's types see it: a false, zero, empty or null field is one left out
    (a protobuf body spells `stdin: false`, the same template in JSON omits it)."""
    if isinstance(value, dict):
        kept = {k: _semantic(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, False, 0, "", [], {})}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def _without_hash(template: dict[str, Any]) -> dict[str, Any]:
    out = _semantic(template or {})
    labels = (out.get("metadata") or {}).get("labels") or {}
    if HASH_LABEL in labels:
        out = copy.deepcopy(out)
        del out["metadata"]["labels"][HASH_LABEL]
    return dict(_semantic(out))


def same_template(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two pod templates are equal, the pod-template-hash label aside."""
    return _without_hash(a) == _without_hash(b)


def _spec_replicas(rs: dict[str, Any]) -> int:
    value = (rs.get("spec") or {}).get("replicas", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _status(rs: dict[str, Any], key: str) -> int:
    value = (rs.get("status") or {}).get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _created(rs: dict[str, Any]) -> tuple[str, str]:
    meta = rs.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))


def split(
    deploy: dict[str, Any], sets: list[dict[str, Any]]
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(the new ReplicaSet or None, the old ones oldest first)."""
    template = deploy["spec"].get("template") or {}
    matching = sorted(
        (rs for rs in sets if same_template(rs["spec"].get("template") or {}, template)), key=_created
    )
    new = matching[0] if matching else None
    return new, sorted((rs for rs in sets if rs is not new), key=_created)


def _copied_annotations(deploy: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in (deploy["metadata"].get("annotations") or {}).items() if k not in _NOT_COPIED}


def new_replica_set(deploy: dict[str, Any], replicas: int, rev: int) -> dict[str, Any]:
    """The ReplicaSet for the Deployment's current template."""
    meta = deploy["metadata"]
    digest = pod_template_hash(_without_hash(deploy["spec"].get("template") or {}))
    template = copy.deepcopy(deploy["spec"].get("template") or {})
    tmeta = template.setdefault("metadata", {}) or {}
    tmeta["labels"] = {**(tmeta.get("labels") or {}), HASH_LABEL: digest}
    template["metadata"] = tmeta
    selector = copy.deepcopy(deploy["spec"].get("selector") or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH_LABEL: digest}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta['name']}-{digest}",
            "namespace": meta["namespace"],
            "labels": dict(tmeta["labels"]),
            "annotations": {
                **_copied_annotations(deploy),
                REVISION: str(rev),
                DESIRED: str(replicas_of(deploy)),
                MAX: str(replicas_of(deploy) + max_surge(deploy)),
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": deploy["spec"].get("minReadySeconds", 0),
            "selector": selector,
            "template": template,
        },
    }


class _Pass:
    """One pass over one Deployment; ReplicaSets are changed in memory as the plan grows, so later
    steps of the pass see the earlier ones' replicas."""

    def __init__(self, deploy: dict[str, Any], sets: list[dict[str, Any]], old_pods: int, now: float) -> None:
        self.d, self.now, self.old_pods = deploy, now, old_pods
        self.replicas = replicas_of(deploy)
        self.surge, self.unavailable = max_surge(deploy), max_unavailable(deploy)
        self.new, self.olds = split(deploy, [copy.deepcopy(rs) for rs in sets])
        self.plan = Plan()
        self.created = ""

    @property
    def all(self) -> list[dict[str, Any]]:
        return [*self.olds, *([self.new] if self.new else [])]

    def _wanted_annotations(self, rs: dict[str, Any]) -> dict[str, str]:
        return {DESIRED: str(self.replicas), MAX: str(self.replicas + self.surge)}

    def scale(self, rs: dict[str, Any], to: int) -> bool:
        was = _spec_replicas(rs)
        wanted = self._wanted_annotations(rs)
        have = rs["metadata"].get("annotations") or {}
        if was == to and all(have.get(k) == v for k, v in wanted.items()):
            return False
        self.plan.update.append((rs, to, wanted))
        rs["spec"]["replicas"] = to
        rs["metadata"]["annotations"] = {**have, **wanted}
        if was != to:
            way = "up" if to > was else "down"
            self.plan.events.append(f"Scaled {way} replica set {rs['metadata']['name']} to {to} from {was}")
        return was != to

    def sync_revision(self) -> None:
        """The new ReplicaSet's revision one more than every old one's, the Deployment's the same."""
        next_rev = max((revision(rs) for rs in self.olds), default=0) + 1
        if self.new is None:
            self.plan.revision = str(next_rev)
            return
        have = self.new["metadata"].get("annotations") or {}
        wanted = {**_copied_annotations(self.d)}
        current = revision(self.new)
        if current < next_rev:
            wanted[REVISION] = str(next_rev)
            if current:
                history = [h for h in str(have.get(REVISION_HISTORY, "")).split(",") if h]
                wanted[REVISION_HISTORY] = ",".join([*history, str(current)])
        if any(have.get(k) != v for k, v in wanted.items()):
            self.plan.update.append((self.new, _spec_replicas(self.new), wanted))
            self.new["metadata"]["annotations"] = {**have, **wanted}
        self.plan.revision = str(revision(self.new))

    def create(self, replicas: int) -> None:
        rs = new_replica_set(self.d, replicas, int(self.plan.revision or 1))
        self.plan.create.append(rs)
        self.new, self.created = rs, rs["metadata"]["name"]
        if replicas > 0:
            self.plan.events.append(f"Scaled up replica set {self.created} to {replicas} from 0")

    def new_replicas(self) -> int:
        """What the new ReplicaSet may grow to within the surge."""
        current = sum(_spec_replicas(rs) for rs in self.all)
        have = _spec_replicas(self.new) if self.new else 0
        room = self.replicas + self.surge - current
        if room <= 0:
            return have
        return have + min(room, self.replicas - have)

    def rolling(self) -> None:
        if self.new is None:
            self.create(self.new_replicas())
        assert self.new is not None
        have = _spec_replicas(self.new)
        if have > self.replicas:
            if self.scale(self.new, self.replicas):
                return
        elif have < self.replicas and self.scale(self.new, self.new_replicas()):
            return
        if self.scale_down_olds():
            return
        self.scale(self.new, _spec_replicas(self.new))  # its replicas annotations
        self.cleanup()

    def scale_down_olds(self) -> bool:
        old_total = sum(_spec_replicas(rs) for rs in self.olds)
        if old_total == 0:
            return False
        assert self.new is not None
        total = sum(_spec_replicas(rs) for rs in self.all)
        min_available = self.replicas - self.unavailable
        new_unavailable = _spec_replicas(self.new) - _status(self.new, "availableReplicas")
        budget = total - min_available - max(0, new_unavailable)
        if budget <= 0:
            return False
        scaled_down = False
        for rs in self.olds:  # unhealthy replicas first: removing them costs no availability
            if budget <= 0:
                break
            unhealthy = _spec_replicas(rs) - _status(rs, "availableReplicas")
            if unhealthy <= 0 or _spec_replicas(rs) == 0:
                continue
            cut = min(budget, unhealthy)
            scaled_down |= self.scale(rs, _spec_replicas(rs) - cut)
            budget -= cut
        available = sum(_status(rs, "availableReplicas") for rs in self.all)
        budget = min(budget, available - min_available)
        for rs in self.olds:
            if budget <= 0:
                break
            cut = min(_spec_replicas(rs), budget)
            if cut > 0:
                scaled_down |= self.scale(rs, _spec_replicas(rs) - cut)
                budget -= cut
        return scaled_down

    def recreate(self) -> None:
        scaled_down = False
        for rs in self.olds:
            if _spec_replicas(rs) > 0:
                scaled_down |= self.scale(rs, 0)
        if scaled_down or self.old_pods > 0:
            return
        if self.new is None:
            self.create(self.replicas)
        elif not self.scale(self.new, self.replicas):
            self.cleanup()

    def paused(self) -> None:
        """A paused Deployment rolls nothing out; a scale still reaches its one active ReplicaSet
        (with none active: the new one, else the newest)."""
        active = [rs for rs in self.all if _spec_replicas(rs) > 0]
        if len(active) == 1:
            self.scale(active[0], self.replicas)
        elif not active and self.all:
            self.scale(self.new or self.olds[-1], self.replicas)

    def cleanup(self) -> None:
        """Old ReplicaSets at 0 beyond revisionHistoryLimit go, once the rollout is complete."""
        if not self.complete():
            return
        limit = self.d["spec"].get("revisionHistoryLimit", 10)
        limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0 else 10
        idle = sorted(
            (
                rs
                for rs in self.olds
                if _spec_replicas(rs) == 0
                and _status(rs, "replicas") == 0
                and _status(rs, "observedGeneration") >= int(rs["metadata"].get("generation") or 0)
            ),
            key=lambda rs: (revision(rs), _created(rs)),
        )
        self.plan.delete.extend(idle[: max(0, len(idle) - limit)])

    def counts(self) -> dict[str, Any]:
        available = sum(_status(rs, "availableReplicas") for rs in self.all)
        total = sum(_spec_replicas(rs) for rs in self.all)
        return {
            "observedGeneration": int(self.d["metadata"].get("generation") or 1),
            "replicas": sum(_status(rs, "replicas") for rs in self.all),
            "updatedReplicas": _status(self.new, "replicas") if self.new else 0,
            "readyReplicas": sum(_status(rs, "readyReplicas") for rs in self.all),
            "availableReplicas": available,
            "unavailableReplicas": max(0, total - available),
        }

    def complete(self, counts: dict[str, Any] | None = None) -> bool:
        c = counts or self.counts()
        return bool(
            c["updatedReplicas"] == self.replicas
            and c["replicas"] == self.replicas
            and c["availableReplicas"] == self.replicas
            and c["observedGeneration"] >= int(self.d["metadata"].get("generation") or 1)
        )

    def status(self) -> dict[str, Any]:
        counts = self.counts()
        old = self.d.get("status") or {}
        conditions: dict[str, dict[str, Any]] = {
            str(c.get("type")): c for c in old.get("conditions") or [] if isinstance(c, dict)
        }
        if counts["availableReplicas"] >= self.replicas - self.unavailable:
            self._condition(
                conditions,
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
            )
        else:
            self._condition(
                conditions,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
            )
        self._progress(conditions, counts, old)
        failure = self._replica_failure()
        if failure is None:
            conditions.pop("ReplicaFailure", None)
        else:
            self._condition(conditions, "ReplicaFailure", *failure)
        kinds = ("Available", "Progressing", "ReplicaFailure")
        return {**counts, "conditions": [conditions[t] for t in kinds if t in conditions]}

    def _replica_failure(self) -> tuple[str, str, str] | None:
        """A ReplicaSet's ReplicaFailure (the new one's first), as the Deployment's condition."""
        for rs in [*([self.new] if self.new else []), *self.olds]:
            for c in (rs.get("status") or {}).get("conditions") or []:
                if isinstance(c, dict) and c.get("type") == "ReplicaFailure":
                    return str(c.get("status")), str(c.get("reason")), str(c.get("message"))
        return None

    def _progress(
        self, conditions: dict[str, dict[str, Any]], counts: dict[str, Any], old: dict[str, Any]
    ) -> None:
        name = self.new["metadata"]["name"] if self.new else ""
        current = conditions.get("Progressing")
        timed_out = current is not None and current.get("reason") == "ProgressDeadlineExceeded"
        if self.d["spec"].get("paused"):
            if not timed_out:
                self._condition(
                    conditions, "Progressing", "Unknown", "DeploymentPaused", "Deployment is paused"
                )
            return
        if current is not None and current.get("reason") == "DeploymentPaused":
            self._condition(
                conditions, "Progressing", "Unknown", "DeploymentResumed", "Deployment is resumed"
            )
            current = conditions["Progressing"]
        if self.created:
            self._condition(
                conditions, "Progressing", "True", "NewReplicaSetCreated", f'Created new replica set "{name}"'
            )
            return
        if current is None:
            self._condition(
                conditions, "Progressing", "True", "FoundNewReplicaSet", f'Found new replica set "{name}"'
            )
            current = conditions["Progressing"]
        if (
            counts["replicas"] == counts["updatedReplicas"]
            and current.get("reason") == "NewReplicaSetAvailable"
        ):
            return
        if self.complete(counts):
            self._condition(
                conditions,
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                f'ReplicaSet "{name}" has successfully progressed.',
            )
        elif _progressing(old, counts):
            self._condition(
                conditions,
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                f'ReplicaSet "{name}" is progressing.',
                touch=True,
            )
        elif self._timed_out(current):
            self._condition(
                conditions,
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                f'ReplicaSet "{name}" has timed out progressing.',
            )

    def _timed_out(self, current: dict[str, Any]) -> bool:
        deadline = self.d["spec"].get("progressDeadlineSeconds", 600)
        if not isinstance(deadline, int) or isinstance(deadline, bool) or current.get("status") != "True":
            return False
        since = _seconds(current.get("lastUpdateTime"))
        return since is not None and since + deadline < self.now

    def _condition(
        self,
        conditions: dict[str, dict[str, Any]],
        kind: str,
        status: str,
        reason: str,
        message: str,
        touch: bool = False,
    ) -> None:
        """Set a condition as the controller does: unchanged when status and reason are the same
        (unless `touch`, progress), its transition time kept while the status is the same."""
        current = conditions.get(kind)
        if current and current.get("status") == status and current.get("reason") == reason and not touch:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now))
        kept = current.get("lastTransitionTime") if current and current.get("status") == status else None
        conditions[kind] = {
            "type": kind,
            "status": status,
            "lastUpdateTime": stamp,
            "lastTransitionTime": kept or stamp,
            "reason": reason,
            "message": message,
        }


def _progressing(old: dict[str, Any], new: dict[str, Any]) -> bool:
    def get(status: dict[str, Any], key: str) -> int:
        value = status.get(key, 0)
        return value if isinstance(value, int) else 0

    return bool(
        new["updatedReplicas"] > get(old, "updatedReplicas")
        or new["replicas"] - new["updatedReplicas"] < get(old, "replicas") - get(old, "updatedReplicas")
        or new["readyReplicas"] > get(old, "readyReplicas")
        or new["availableReplicas"] > get(old, "availableReplicas")
    )


def _seconds(stamp: Any) -> float | None:
    try:
        return float(time.mktime(time.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ")) - time.timezone)
    except ValueError:
        return None


def plan(
    deploy: dict[str, Any], sets: list[dict[str, Any]], old_pods: int = 0, now: float | None = None
) -> Plan:
    """The writes of one pass over `deploy`, given the ReplicaSets it controls and how many pods
    of its old ReplicaSets still run (terminating ones included; what Recreate waits for)."""
    step = _Pass(deploy, sets, old_pods, time.time() if now is None else now)
    step.sync_revision()
    if deploy["spec"].get("paused"):
        step.paused()
    elif is_recreate(deploy):
        step.recreate()
    else:
        step.rolling()
    if step.new is None:
        step.plan.revision = ""  # the Deployment's revision is its new ReplicaSet's, once there is one
    step.plan.status = step.status()
    return step.plan
