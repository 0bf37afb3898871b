"""The Job controller of the lab's kube-controller-manager, and its TTL-after-finished controller, for
NonIndexed Jobs, as kube-controller-manager 1.31+ runs them where a user can tell:

- **Pods**: made from `spec.template` (with the labels the API server put on it:
  `batch.kubernetes.io/controller-uid`, `batch.kubernetes.io/job-name` and their legacy
  `controller-uid`, `job-name`), `generateName: <job>-`, a controlling owner reference
  (blockOwnerDeletion) and the `batch.kubernetes.io/job-tracking` finalizer: a finished pod is counted once into
  `status.succeeded`/`failed` (through `status.uncountedTerminatedPods`), then the finalizer is
  removed, so deleting a pod never loses or doubles a count.
- **How many**: `parallelism` (default 1) active pods, never more than the completions left;
  without `completions` (and with `parallelism` set) the Job is a work queue: once one pod
  succeeded no new pod is made and it completes when the others have ended.
- **Failures**: a Failed pod, or one deleted before it succeeded, counts as failed and is replaced
  after a back-off of 10 s doubling to 10 min since the last failure (reset by a success). More
  failures than `backoffLimit` (default 6), or, with restartPolicy OnFailure, as many container
  restarts in its running pods as `backoffLimit`, ends it: condition FailureTarget
  (BackoffLimitExceeded, "Job has reached the specified backoff limit"), its active pods deleted,
  then, once none is terminating, Failed with the same reason. `activeDeadlineSeconds` past since
  `startTime` does the same with DeadlineExceeded, "Job was active longer than specified deadline".
- **Success**: `completions` succeeded pods (or, for a work queue, one and no active pod) give
  SuccessCriteriaMet, then Complete with `completionTime`.
- **suspend**: active pods are deleted (not counted as failed), condition Suspended
  (JobSuspended); resuming sets Suspended False (JobResumed) and restarts `startTime`, so the
  deadline counts from the resume.
- **Status**: `active`, `ready`, `terminating`, `succeeded`, `failed`, `startTime`,
  `uncountedTerminatedPods` as the Job controller writes them; events SuccessfulCreate,
  SuccessfulDelete, Completed, BackoffLimitExceeded, DeadlineExceeded, Suspended, Resumed.
- **ttlSecondsAfterFinished**: that long after the Complete or Failed condition the Job is deleted
  (its pods go with it through the garbage collector).

Not run (the Job is named as not reconciled): Indexed completion, podFailurePolicy, successPolicy,
backoffLimitPerIndex. A Job whose `spec.managedBy` names another controller is left alone, as in
kube-controller-manager.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from sim import recorder

from kube.rest import json_object

log = logging.getLogger("lab.jobs")
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
JOB_CONTROLLER = "kubernetes.io/job-controller"
TERMINAL = ("Succeeded", "Failed")
DEFAULT_BACKOFF_LIMIT = 6
POD_FAILURE_BACKOFF = (10.0, 600.0)  # kube-controller-manager: 10 s doubling to 10 min
MAX_PODS = 1000  # parallelism and completions the lab runs
CREATE_BATCH = 20  # pods a Job gets per pass
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
UNSUPPORTED = ("podFailurePolicy", "successPolicy", "backoffLimitPerIndex", "maxFailedIndexes")


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class JobSpec:
    """The fields of `spec` the controller acts on, with the API server's defaults."""

    parallelism: int
    completions: int | None  # None: a work queue
    backoff_limit: int
    deadline: int | None
    suspend: bool
    ttl: int | None
    on_failure: bool  # the template's restartPolicy is OnFailure (else Never)
    only_failed: bool  # podReplacementPolicy Failed: a replacement waits for terminating pods


def _count(spec: dict[str, Any], field: str, default: int | None, top: int) -> int | None:
    value = spec.get(field, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise ValueError(f"spec.{field} {str(value)[:40]!r}: the lab runs Jobs with 0 to {top}")
    return value


def read_spec(job: dict[str, Any]) -> JobSpec:
    """The Job's spec as the controller reads it; ValueError names a field the lab does not run."""
    spec = job.get("spec") or {}
    if spec.get("completionMode", "NonIndexed") != "NonIndexed":
        raise ValueError(
            f"spec.completionMode {str(spec['completionMode'])[:40]!r}: the lab runs NonIndexed Jobs only"
        )
    for field in UNSUPPORTED:
        if spec.get(field) is not None:
            raise ValueError(f"spec.{field}: the lab's Job controller does not run it")
    template = (spec.get("template") or {}).get("spec") or {}
    policy = template.get("restartPolicy")
    if policy not in ("Never", "OnFailure"):
        raise ValueError(
            f"spec.template.spec.restartPolicy {str(policy)[:40]!r}: a Job's pods use Never or OnFailure"
        )
    parallelism = _count(spec, "parallelism", None, MAX_PODS)
    # kube-apiserver's defaults: both unset -> 1 and 1; only parallelism set -> a work queue
    completions = _count(spec, "completions", 1 if parallelism is None else None, MAX_PODS)
    return JobSpec(
        parallelism=1 if parallelism is None else parallelism,
        completions=completions,
        backoff_limit=_count(spec, "backoffLimit", DEFAULT_BACKOFF_LIMIT, 2**31 - 1) or 0,
        deadline=_count(spec, "activeDeadlineSeconds", None, 2**62),
        suspend=spec.get("suspend") is True,
        ttl=_count(spec, "ttlSecondsAfterFinished", None, 2**31 - 1),
        on_failure=policy == "OnFailure",
        only_failed=spec.get("podReplacementPolicy") == "Failed",
    )


def job_pod(job: dict[str, Any]) -> dict[str, Any]:
    """The pod the Job controller makes from the Job's template."""
    meta = job["metadata"]
    template = copy.deepcopy(job["spec"]["template"])
    tmeta = template.get("metadata") or {}
    uid, name = meta["uid"], meta["name"]
    labels = dict(tmeta.get("labels") or {})  # the API server labelled the template (unless manualSelector)
    spec = template.get("spec") or {}
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        for kind in ("limits", "requests"):
            values = (c.get("resources") or {}).get(kind)
            if isinstance(values, dict):
                for key, value in values.items():
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        values[key] = str(value)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name}-",
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": tmeta.get("annotations") or {},
            "finalizers": [*(tmeta.get("finalizers") or []), TRACKING_FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def _phase(pod: dict[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def _deleting(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def is_active(pod: dict[str, Any]) -> bool:
    return _phase(pod) not in TERMINAL and not _deleting(pod)


def is_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def is_failed(pod: dict[str, Any], spec: JobSpec) -> bool:
    """Failed, or (unless replacements wait for the Failed phase) deleted before it succeeded."""
    if _phase(pod) == "Failed":
        return True
    return not spec.only_failed and _deleting(pod) and _phase(pod) != "Succeeded"


def tracked(pod: dict[str, Any]) -> bool:
    return TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or [])


def finished_at(pod: dict[str, Any]) -> float:
    """When a pod ended: its containers' last finishedAt, else its Ready=False transition, else
    its deletion, else its creation (the Job controller's order)."""
    status = pod.get("status") or {}
    times = [
        parse_time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for s in status.get("containerStatuses") or []
    ]
    if times and all(t is not None for t in times):
        return max(t for t in times if t is not None)
    for c in status.get("conditions") or []:
        t = parse_time(c.get("lastTransitionTime"))
        if c.get("type") == "Ready" and c.get("status") == "False" and t is not None:
            return t
    meta = pod["metadata"]
    if (t := parse_time(meta.get("deletionTimestamp"))) is not None:
        return t - float(meta.get("deletionGracePeriodSeconds") or 0)
    return parse_time(meta.get("creationTimestamp")) or time.time()


def restarts(pods: list[dict[str, Any]]) -> int:
    """Container restarts in the running and pending pods (what backoffLimit caps for OnFailure)."""
    total = 0
    for pod in pods:
        if _phase(pod) in ("Running", "Pending"):
            status = pod.get("status") or {}
            for s in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
                count = s.get("restartCount") or 0
                total += count if isinstance(count, int) else 0
    return total


def condition(conditions: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None)


def finished(job: dict[str, Any]) -> dict[str, Any] | None:
    """The Complete or Failed condition of a finished Job."""
    conditions = (job.get("status") or {}).get("conditions") or []
    return condition(conditions, "Complete") or condition(conditions, "Failed")


def _condition(kind: str, reason: str, message: str, stamp: str, status: str = "True") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def _set_condition(
    conditions: list[dict[str, Any]], kind: str, status: str, reason: str, message: str, stamp: str
) -> bool:
    """ensureJobConditionStatus: update the condition of `kind` if it exists, add it only when it
    turns True. True when something changed."""
    for c in conditions:
        if c.get("type") == kind:
            if c.get("status") == status:
                return False
            c.update(_condition(kind, reason, message, stamp, status))
            return True
    if status == "True":
        conditions.append(_condition(kind, reason, message, stamp))
        return True
    return False


@dataclass
class Backoff:
    """The controller's memory of a Job's failures since its last success (kept in memory, as
    kube-controller-manager keeps it)."""

    failures: int = 0
    last_failure: float | None = None

    def record(self, succeeded: list[dict[str, Any]], failed: list[dict[str, Any]]) -> None:
        if not succeeded:
            if failed:
                self.failures += len(failed)
                self.last_failure = max(finished_at(p) for p in failed)
            return
        last_success = max(finished_at(p) for p in succeeded)
        later = sorted((t for t in map(finished_at, failed) if t > last_success), reverse=True)
        self.failures = len(later)
        self.last_failure = later[0] if later else None

    def remaining(self, now: float, backoff: tuple[float, float]) -> float:
        if not self.failures or self.last_failure is None:
            return 0.0
        initial, cap = backoff
        delay = min(cap, initial * 2.0 ** min(self.failures - 1, 40))
        return max(0.0, delay - (now - self.last_failure))


class JobController:
    """One pass over every Job (`sync`), called by the lab's controller manager with what it listed."""

    def __init__(
        self,
        api_client: Any,
        echo: Callable[[str], None] | None = None,
        backoff: tuple[float, float] = POD_FAILURE_BACKOFF,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.echo = echo or (lambda text: None)
        self.backoff = backoff
        self._backoffs: dict[str, Backoff] = {}

    def list_jobs(self) -> list[dict[str, Any]]:
        resp = self.batch.list_job_for_all_namespaces(_preload_content=False, _request_timeout=5)
        return json.loads(resp.data).get("items") or []

    # ---- one Job ----------------------------------------------------------------------------------

    def sync_job(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        """Reconcile one Job with its pods (those it controls)."""
        managed_by = (job.get("spec") or {}).get("managedBy")
        if managed_by not in (None, JOB_CONTROLLER):
            return
        uid = job["metadata"]["uid"]
        done = finished(job)
        if done is not None:
            self._backoffs.pop(uid, None)
            self._release(p for p in pods if tracked(p))
            self._expire(job, done)
            return
        spec = read_spec(job)
        Pass(self, job, spec, pods, self._backoffs.setdefault(uid, Backoff())).run()

    def forget(self, live_uids: set[str]) -> None:
        for uid in [u for u in self._backoffs if u not in live_uids]:
            del self._backoffs[uid]

    def release_orphans(self, pods: list[dict[str, Any]], jobs: dict[str, dict[str, Any]]) -> None:
        """The tracking finalizer off pods whose Job is gone or finished (else they never go away)."""
        orphans = []
        for pod in pods:
            ref = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            if not tracked(pod):
                continue
            if ref is not None and (ref.get("kind"), ref.get("apiVersion")) != ("Job", "batch/v1"):
                continue
            job = jobs.get(str((ref or {}).get("uid")))
            if job is None or finished(job) is not None:
                orphans.append(pod)
        self._release(orphans)

    def _expire(self, job: dict[str, Any], done: dict[str, Any]) -> None:
        """The TTL-after-finished controller: delete the Job `ttlSecondsAfterFinished` after it ended."""
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
            return
        ended = parse_time(done.get("lastTransitionTime"))
        if ended is None or time.time() < ended + ttl:
            return
        meta = job["metadata"]
        body = client.V1DeleteOptions(
            propagation_policy="Foreground", preconditions=client.V1Preconditions(uid=meta["uid"])
        )
        try:
            self.batch.delete_namespaced_job(
                meta["name"], meta["namespace"], body=body, _preload_content=False, _request_timeout=5
            )
        except client.ApiException as error:
            if error.status not in (404, 409):
                raise
            return
        self.echo(f"job {meta['namespace']}/{meta['name']}: deleted {ttl}s after it finished")

    # ---- API writes -------------------------------------------------------------------------------

    def _release(self, pods: Any) -> list[str]:
        """Remove the tracking finalizer; the UIDs of the pods that no longer carry it."""
        done = []
        for pod in pods:
            meta = pod["metadata"]
            patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}}
            try:
                self.core.patch_namespaced_pod(
                    meta["name"],
                    meta["namespace"],
                    patch,
                    _content_type=STRATEGIC,
                    _preload_content=False,
                    _request_timeout=5,
                )
            except client.ApiException as error:
                if error.status != 404:
                    log.debug("tracking finalizer of %s not removed: %s", meta["name"], error)
                    continue
            done.append(meta["uid"])
        return done

    def create_pod(self, job: dict[str, Any]) -> dict[str, Any]:
        meta = job["metadata"]
        resp = self.core.create_namespaced_pod(
            meta["namespace"], job_pod(job), _preload_content=False, _request_timeout=5
        )
        made = json_object(f"create pod for job {meta['name']}", json.loads(resp.data))
        self.echo(f"job {meta['namespace']}/{meta['name']}: created pod {made['metadata']['name']}")
        self.event(job, "Normal", "SuccessfulCreate", f"Created pod: {made['metadata']['name']}")
        return made

    def delete_pod(self, job: dict[str, Any], pod: dict[str, Any], release: bool) -> bool:
        """Delete a pod of the Job; `release`: take the tracking finalizer off first (the pod is then
        not counted as failed: the Job has too many, or is suspended)."""
        meta = pod["metadata"]
        if release and tracked(pod) and not self._release([pod]):
            return False
        try:
            self.core.delete_namespaced_pod(
                meta["name"], meta["namespace"], _preload_content=False, _request_timeout=5
            )
        except client.ApiException as error:
            if error.status == 404:
                return True
            raise
        self.event(job, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}")
        return True

    def write_status(self, job: dict[str, Any], status: dict[str, Any]) -> None:
        meta = job["metadata"]
        self.batch.patch_namespaced_job_status(
            meta["name"],
            meta["namespace"],
            {"status": status},
            _content_type=MERGE,
            _preload_content=False,
            _request_timeout=5,
        )
        job["status"] = status

    def event(self, job: dict[str, Any], kind: str, reason: str, message: str) -> None:
        recorder.record(
            self.core,
            job,
            api_version="batch/v1",
            kind="Job",
            type_=kind,
            reason=reason,
            message=message,
            component="job-controller",
        )


class Pass:
    """One sync of one unfinished Job (kube-controller-manager's syncJob, NonIndexed)."""

    def __init__(
        self,
        controller: JobController,
        job: dict[str, Any],
        spec: JobSpec,
        pods: list[dict[str, Any]],
        backoff: Backoff,
    ) -> None:
        self.c, self.job, self.spec, self.pods, self.backoff = controller, job, spec, pods, backoff
        self.now = time.time()
        self.stamp = rfc3339(self.now)
        self.before = copy.deepcopy(job.get("status") or {})
        self.status = copy.deepcopy(self.before)
        uncounted = self.status.get("uncountedTerminatedPods") or {}
        self.uncounted = {
            "succeeded": [str(u) for u in uncounted.get("succeeded") or []],
            "failed": [str(u) for u in uncounted.get("failed") or []],
        }
        self.conditions: list[dict[str, Any]] = self.status.setdefault("conditions", [])
        self.active = [p for p in pods if is_active(p)]
        self.terminating = sum(1 for p in pods if _deleting(p) and _phase(p) not in TERMINAL)
        self.ready = sum(1 for p in self.active if is_ready(p))

    def _new(self, test: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        counted = set(self.uncounted["succeeded"] + self.uncounted["failed"])
        return [p for p in self.pods if tracked(p) and p["metadata"]["uid"] not in counted and test(p)]

    def run(self) -> None:
        spec, st = self.spec, self.status
        new_succeeded = self._new(lambda p: _phase(p) == "Succeeded")
        new_failed = self._new(lambda p: is_failed(p, spec))
        succeeded = int(st.get("succeeded") or 0) + len(new_succeeded) + len(self.uncounted["succeeded"])
        failed = int(st.get("failed") or 0) + len(new_failed) + len(self.uncounted["failed"])
        if not st.get("startTime") and not spec.suspend:
            st["startTime"] = self.stamp
        self.backoff.record(new_succeeded, new_failed)

        target = condition(self.conditions, "SuccessCriteriaMet") or condition(
            self.conditions, "FailureTarget"
        )
        if target is None:
            if failed > spec.backoff_limit or self._past_restarts():
                target = _condition(
                    "FailureTarget",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                    self.stamp,
                )
            elif self._past_deadline():
                target = _condition(
                    "FailureTarget",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                    self.stamp,
                )
        if target is not None:
            self._delete_active(target)
        else:
            managed = not self.job["metadata"].get("deletionTimestamp")
            if managed:
                self._manage(succeeded)
            active = len(self.active)
            complete = (
                succeeded > 0 if spec.completions is None else succeeded >= spec.completions
            ) and not active
            if complete:
                target = _condition(
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    self.stamp,
                )
            elif managed:
                self._suspend_condition()
        self._track(target)

    def _past_restarts(self) -> bool:
        if not self.spec.on_failure:
            return False
        count = restarts(self.pods)
        return count > 0 if self.spec.backoff_limit == 0 else count >= self.spec.backoff_limit

    def _past_deadline(self) -> bool:
        start = parse_time(self.status.get("startTime"))
        if self.spec.deadline is None or start is None or self.spec.suspend:
            return False
        return self.now - start >= self.spec.deadline

    def _delete_active(self, target: dict[str, Any]) -> None:
        """A Job that is failing or has succeeded: its active pods are deleted (keeping their
        finalizer: a failing Job counts them as failed)."""
        for pod in list(self.active):
            if self.c.delete_pod(self.job, pod, release=False):
                self.active.remove(pod)
                self.terminating += 1
                self.ready -= is_ready(pod)

    def _manage(self, succeeded: int) -> None:
        spec = self.spec
        if spec.suspend:
            self._remove(len(self.active))
            return
        if spec.completions is None:
            want = len(self.active) if succeeded > 0 else spec.parallelism
        else:
            want = max(0, min(spec.parallelism, spec.completions - succeeded))
        if len(self.active) > want:
            self._remove(len(self.active) - want)
            return
        waiting = self.terminating if spec.only_failed else 0
        missing = want - waiting - len(self.active)
        if missing <= 0 or self.backoff.remaining(self.now, self.c.backoff) > 0:
            return
        for _ in range(min(missing, CREATE_BATCH)):
            self.active.append(self.c.create_pod(self.job))

    def _remove(self, count: int) -> None:
        """Delete `count` active pods, those least along first (not ready, unscheduled, pending)."""
        order = sorted(
            self.active,
            key=lambda p: (is_ready(p), bool((p.get("spec") or {}).get("nodeName")), _phase(p) == "Running"),
        )
        for pod in order[:count]:
            if self.c.delete_pod(self.job, pod, release=True):
                self.active.remove(pod)
                self.terminating += 1
                self.ready -= is_ready(pod)

    def _suspend_condition(self) -> None:
        if self.spec.suspend:
            if _set_condition(
                self.conditions, "Suspended", "True", "JobSuspended", "Job suspended", self.stamp
            ):
                self.c.event(self.job, "Normal", "Suspended", "Job suspended")
        elif _set_condition(self.conditions, "Suspended", "False", "JobResumed", "Job resumed", self.stamp):
            self.c.event(self.job, "Normal", "Resumed", "Job resumed")
            self.status["startTime"] = self.stamp  # the deadline counts from the resume

    def _track(self, target: dict[str, Any] | None) -> None:
        """Count finished pods through uncountedTerminatedPods, remove their finalizers, then add
        the final condition once nothing is left uncounted or terminating."""
        st, uncounted = self.status, self.uncounted
        ending = target is not None and target["type"] == "FailureTarget"
        release = []
        for pod in self.pods:
            uid = pod["metadata"]["uid"]
            if not tracked(pod):
                continue
            failed = is_failed(pod, self.spec)
            if not (
                self.job["metadata"].get("deletionTimestamp")
                or target
                or _phase(pod) == "Succeeded"
                or failed
            ):
                continue
            release.append(pod)
            if _phase(pod) == "Succeeded" and uid not in uncounted["failed"]:
                if uid not in uncounted["succeeded"]:
                    uncounted["succeeded"].append(uid)
            elif (failed or ending) and uid not in uncounted["failed"]:
                uncounted["failed"].append(uid)
        final = None
        if target is not None:
            if condition(self.conditions, target["type"]) is None:
                self.conditions.append(target)
            final = "Failed" if ending else "Complete"
        st.update(
            active=len(self.active),
            ready=self.ready,
            terminating=self.terminating,
            uncountedTerminatedPods=copy.deepcopy(uncounted),
        )
        st.setdefault("succeeded", int(st.get("succeeded") or 0))
        st.setdefault("failed", int(st.get("failed") or 0))
        self._flush()
        still = {p["metadata"]["uid"] for p in self.pods if tracked(p)} - set(self.c._release(release))
        for kind in ("succeeded", "failed"):
            left = [u for u in uncounted[kind] if u in still]
            st[kind] = int(st.get(kind) or 0) + len(uncounted[kind]) - len(left)
            uncounted[kind] = left
        st["uncountedTerminatedPods"] = copy.deepcopy(uncounted)
        if final and not uncounted["succeeded"] and not uncounted["failed"] and not self.terminating:
            assert target is not None, "a final condition follows its interim one"
            self.conditions.append(_condition(final, target["reason"], target["message"], self.stamp))
            if final == "Complete":
                st["completionTime"] = self.stamp
        self._flush()
        if final and condition(self.conditions, final):
            self._report(final, target or {})

    def _flush(self) -> None:
        if self.status != self.before:
            self.c.write_status(self.job, copy.deepcopy(self.status))
            self.before = copy.deepcopy(self.status)

    def _report(self, final: str, target: dict[str, Any]) -> None:
        meta = self.job["metadata"]
        where = f"job {meta['namespace']}/{meta['name']}"
        if final == "Complete":
            self.c.event(self.job, "Normal", "Completed", "Job completed")
            self.c.echo(f"{where}: Complete ({self.status.get('succeeded')} succeeded)")
        else:
            self.c.event(self.job, "Warning", target["reason"], target["message"])
            self.c.echo(f"{where}: Failed ({target['reason']}: {target['message']})")
