"""kube-controller-manager's ResourceClaim controller, simulated: claims from templates, and their release.

Checked against kubernetes `pkg/controller/resourceclaim/controller.go` (`syncPod`, `handleClaim`,
`findPodResourceClaim`, `reserveForPod`, `syncClaim`, `isPodDone`, `owningPod`) and
`staging/src/k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go` (sim.dra.podclaims).
One pass (`sync`) does what its work queue does for every pod and claim:

- **pods** (not being deleted, not finished: upstream would still make a claim for a finished pod
  and delete it on the next pass) with `spec.resourceClaims[].resourceClaimTemplateName`: a claim not yet
  recorded in `status.resourceClaimStatuses` (or recorded but no longer controlled by the pod) is
  found among the claims the pod controls with the `resource.kubernetes.io/pod-claim-name`
  annotation, else created from the template: `generateName: <pod>-<claim>-` (both parts cut in
  proportion past 57 characters), the template's labels and annotations plus that annotation, an
  owner reference to the pod (controller, blockOwnerDeletion), the template's spec. Then the pod's
  status gets the names by server-side apply (field manager `ResourceClaimController`, forced). A
  missing template is a `FailedResourceClaimCreation` Warning event on the pod
  (`PodResourceClaim <name>: resource claim template "<t>": ...`) and the pod is retried. A pod
  bound to a node (not by the scheduler) gets its allocated claims reserved for it.
- **claims**: a `reservedFor` pod that is gone (checked with a GET when not in the list: it may be
  newer than the list), replaced (other uid) or done (terminal, or deleted before it was scheduled)
  is removed, with a status update carrying the read resourceVersion (a conflict is retried next
  pass); when none is left, the allocation is cleared (the claim carries the scheduler's
  `resource.kubernetes.io/delete-protection` finalizer) and then the finalizer is removed. A claim
  being deleted with no consumer left loses its allocation and finalizer too. A claim with no
  consumer generated for a pod that is done or replaced is deleted.
- **garbage collection**: kube-controller-manager's garbage collector deletes a claim whose
  controlling pod is gone; the simulated API server has none, so this controller does it, for
  claims it generated (owner reference to a pod, the annotation) once a GET confirms that the pod
  with that uid no longer exists.

Polling rather than informers (as the lab's other controllers): every `interval` the pods, claims and
templates are listed. Events are not aggregated as client-go's recorder does: one per distinct
failure of a pod. Not simulated: admin access checks, claim metrics, extended-resource claims.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client

from sim import recorder
from sim.dra import podclaims
from sim.dra.podclaims import JSON, ClaimNameError

log = logging.getLogger("sim.dra.claims")
FIELD_MANAGER = "ResourceClaimController"
MAX_BASE_LEN = 57  # 63 minus a hyphen and 5 random characters
APPLY = "application/apply-patch+yaml"


def generate_name(pod_name: str, claim_name: str) -> str:
    """handleClaim's generateName: `<pod>-<claim>-`, both parts shortened in proportion when long."""
    name = f"{pod_name}-{claim_name}-"
    if len(name) > MAX_BASE_LEN:
        total = len(name)
        name = (
            pod_name[: len(pod_name) * MAX_BASE_LEN // total]
            + "-"
            + claim_name[: len(claim_name) * MAX_BASE_LEN // total]
        )
    return name


def claim_from_template(pod: JSON, pod_claim_name: str, template: JSON) -> JSON:
    """The ResourceClaim handleClaim creates for the pod's claim from the template."""
    spec = template.get("spec")
    if not isinstance(spec, dict):
        raise ClaimNameError(f"resource claim template {template['metadata'].get('name')!r}: spec missing")
    tmeta = spec.get("metadata") if isinstance(spec.get("metadata"), dict) else {}
    annotations = dict(tmeta.get("annotations") or {})
    annotations[podclaims.POD_CLAIM_ANNOTATION] = pod_claim_name
    meta: JSON = {
        "generateName": generate_name(pod["metadata"]["name"], pod_claim_name),
        "namespace": pod["metadata"]["namespace"],
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod["metadata"]["name"],
                "uid": pod["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "annotations": annotations,
    }
    if tmeta.get("labels"):
        meta["labels"] = dict(tmeta["labels"])
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": copy.deepcopy(spec.get("spec") or {}),
    }


def _items(resp: Any) -> list[JSON]:
    items = json.loads(resp.data).get("items") or []
    return [i for i in items if isinstance(i, dict) and isinstance(i.get("metadata"), dict)]


def _api_message(error: client.ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)


def _key(obj: JSON) -> tuple[str, str]:
    return (str(obj["metadata"].get("namespace", "")), str(obj["metadata"].get("name", "")))


class ResourceClaimController:
    """Args:
    api_client: an official-client ApiClient with the controller's identity.
    interval: seconds between passes of the polling loop (`start`); `sync` runs one pass.
    echo: where to say what it did (the lab's console); default nowhere.
    """

    def __init__(self, api_client: Any, interval: float = 0.2, echo: Callable[[str], None] | None = None):
        self.core = client.CoreV1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.interval = interval
        self.echo = echo or (lambda text: None)
        self._reported: dict[str, str] = {}  # pod uid -> last failure reported as an event
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resourceclaim-controller", daemon=True)

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> ResourceClaimController:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception as error:  # noqa: BLE001 - an unavailable API: try again next pass
                log.debug("resourceclaim controller: %s", error)

    # ---- one pass ------------------------------------------------------------------------------
    def sync(self) -> None:
        pods = _items(self.core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=5))
        claims = _items(
            self.resource.list_resource_claim_for_all_namespaces(_preload_content=False, _request_timeout=5)
        )
        templates = {
            _key(t): t
            for t in _items(
                self.resource.list_resource_claim_template_for_all_namespaces(
                    _preload_content=False, _request_timeout=5
                )
            )
        }
        by_name = {_key(c): c for c in claims}
        for pod in pods:
            if pod.get("spec", {}).get("resourceClaims"):
                self._guarded(pod, self._sync_pod, pod, by_name, templates, claims)
        pods_by_name = {_key(p): p for p in pods}
        for claim in claims:
            try:
                self._sync_claim(claim, pods_by_name)
            except client.ApiException as error:  # a conflict or a gone claim: next pass
                log.debug("claim %s/%s: %s", *_key(claim), _api_message(error))
            except Exception as error:  # noqa: BLE001 - one malformed claim must not stop the others
                log.info("claim %s/%s not handled: %s: %s", *_key(claim), type(error).__name__, error)
        live = {str(p["metadata"].get("uid")) for p in pods}
        self._reported = {uid: msg for uid, msg in self._reported.items() if uid in live}

    def _guarded(self, pod: JSON, step: Callable[..., None], *args: Any) -> None:
        """One pod's pass; a failure is an event on the pod (once per distinct message) and is
        retried next pass, never keeping the other pods from being handled."""
        try:
            step(*args)
        except Exception as error:  # noqa: BLE001 - one malformed pod must not stop the others
            text = _api_message(error) if isinstance(error, client.ApiException) else str(error)
            if not isinstance(error, (ClaimNameError, client.ApiException)):
                text = f"unreadable pod: {type(error).__name__}: {error}"
            uid = str(pod["metadata"].get("uid"))
            if self._reported.get(uid) != text:
                self._reported[uid] = text
                self.echo(f"pod {'/'.join(_key(pod))}: {text}")
                recorder.record(
                    self.core,
                    pod,
                    api_version="v1",
                    kind="Pod",
                    type_="Warning",
                    reason="FailedResourceClaimCreation",
                    message=text,
                    component="resource_claim",
                )

    # ---- pods ----------------------------------------------------------------------------------
    def _sync_pod(
        self,
        pod: JSON,
        claims: dict[tuple[str, str], JSON],
        templates: dict[tuple[str, str], JSON],
        all_claims: list[JSON],
    ) -> None:
        if pod["metadata"].get("deletionTimestamp") or podclaims.is_pod_done(pod):
            return  # upstream ignores pods being deleted; a finished pod needs no new claim
        new: dict[str, str] = {}
        for pod_claim in podclaims.pod_claims(pod):
            made = self._handle_claim(pod, pod_claim, claims, templates, all_claims)
            if made is not None:
                new[str(pod_claim.get("name"))] = made
        if new:
            self._apply_claim_statuses(pod, new)
        if pod.get("spec", {}).get("nodeName"):
            self._reserve_bound(pod, claims)

    def _handle_claim(
        self,
        pod: JSON,
        pod_claim: JSON,
        claims: dict[tuple[str, str], JSON],
        templates: dict[tuple[str, str], JSON],
        all_claims: list[JSON],
    ) -> str | None:
        """The name of the claim made (or found) for `pod_claim`, None when nothing is new."""
        ns = pod["metadata"]["namespace"]
        name = str(pod_claim.get("name"))
        try:
            resolved = podclaims.claim_name(pod, pod_claim)
        except ClaimNameError as error:
            if "not created yet" not in str(error):
                raise ClaimNameError(
                    f"PodResourceClaim {name}: checking for claim before creating it: {error}"
                ) from error
        else:
            if resolved.name is None:
                return None
            existing = claims.get((ns, resolved.name))
            if existing is not None and not (resolved.check_owner and podclaims.is_for_pod(pod, existing)):
                return None  # already created
            if not resolved.check_owner:
                return None  # a claim the user names: theirs to create
        template_name = pod_claim.get("resourceClaimTemplateName")
        if not isinstance(template_name, str):
            return None
        found = self._find_pod_claim(pod, name, all_claims)
        if found is not None:
            return str(found["metadata"]["name"])
        template = templates.get((ns, template_name))
        if template is None:
            raise ClaimNameError(
                f'PodResourceClaim {name}: resource claim template "{template_name}": '
                f'resourceclaimtemplate.resource.k8s.io "{template_name}" not found'
            )
        body = claim_from_template(pod, name, template)
        try:
            resp = self.resource.create_namespaced_resource_claim(
                ns, body, _preload_content=False, _request_timeout=5
            )
        except client.ApiException as error:
            raise ClaimNameError(
                f"PodResourceClaim {name}: create ResourceClaim {body['metadata']['generateName']}: "
                f"{_api_message(error)}"
            ) from error
        made: JSON = json.loads(resp.data)
        all_claims.append(made)  # as the mutation cache: a retry before the next list finds it
        claims[_key(made)] = made
        self.echo(f"pod {ns}/{pod['metadata']['name']}: created resource claim {made['metadata']['name']}")
        return str(made["metadata"]["name"])

    @staticmethod
    def _find_pod_claim(pod: JSON, pod_claim_name: str, claims: list[JSON]) -> JSON | None:
        """findPodResourceClaim: a claim the pod controls, annotated with this pod claim's name (made
        before a failed status update)."""
        uid = pod["metadata"].get("uid")
        for claim in claims:
            ref = podclaims.controller_ref(claim)
            if (
                ref is None
                or ref.get("uid") != uid
                or ref.get("kind") != "Pod"
                or ref.get("apiVersion") != "v1"
            ):
                continue
            if (claim["metadata"].get("annotations") or {}).get(
                podclaims.POD_CLAIM_ANNOTATION
            ) == pod_claim_name:
                return claim
        return None

    def _apply_claim_statuses(self, pod: JSON, new: dict[str, str]) -> None:
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": {
                "resourceClaimStatuses": [{"name": k, "resourceClaimName": v} for k, v in sorted(new.items())]
            },
        }
        self.core.patch_namespaced_pod_status(
            meta["name"],
            meta["namespace"],
            body,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type=APPLY,
            _preload_content=False,
            _request_timeout=5,
        )

    def _reserve_bound(self, pod: JSON, claims: dict[tuple[str, str], JSON]) -> None:
        """syncPod for a pod on a node: its allocated claims not yet reserved for it are (reserveForPod)."""
        for pod_claim in podclaims.pod_claims(pod):
            resolved = podclaims.claim_name(pod, pod_claim)
            if resolved.name is None:
                continue
            claim = claims.get((pod["metadata"]["namespace"], resolved.name))
            if claim is None:
                return
            if resolved.check_owner and (why := podclaims.is_for_pod(pod, claim)):
                raise ClaimNameError(why)
            if (
                podclaims.allocation(claim) is not None
                and not podclaims.is_reserved_for_pod(pod, claim)
                and podclaims.can_be_reserved(claim)
            ):
                updated = copy.deepcopy(claim)
                updated["status"]["reservedFor"] = [
                    *podclaims.reserved_for(claim),
                    {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]},
                ]
                self._update_status(updated)

    # ---- claims --------------------------------------------------------------------------------
    def _pod_gone_or_replaced(self, namespace: str, name: str, uid: str) -> bool:
        """Not in the list: the pod may be newer than it, so the API server decides (syncClaim)."""
        try:
            resp = self.core.read_namespaced_pod(name, namespace, _preload_content=False, _request_timeout=5)
        except client.ApiException as error:
            if error.status == 404:
                return True
            raise
        return str(json.loads(resp.data)["metadata"].get("uid")) != uid

    def _still_valid(self, entry: JSON, namespace: str, pods: dict[tuple[str, str], JSON]) -> bool:
        if entry.get("apiGroup") or entry.get("resource") != "pods":
            raise ClaimNameError(f"unsupported ReservedFor entry: {entry}")
        name, uid = str(entry.get("name") or ""), str(entry.get("uid") or "")
        pod = pods.get((namespace, name))
        if pod is None:
            return not self._pod_gone_or_replaced(namespace, name, uid)
        return str(pod["metadata"].get("uid")) == uid and not podclaims.is_pod_done(pod)

    def _sync_claim(self, claim: JSON, pods: dict[tuple[str, str], JSON]) -> None:
        namespace = str(claim["metadata"].get("namespace", ""))
        reserved = podclaims.reserved_for(claim)
        try:
            valid = [e for e in reserved if self._still_valid(e, namespace, pods)]
        except ClaimNameError as error:
            log.debug("claim %s/%s: %s", *_key(claim), error)
            return
        deleting = bool(claim["metadata"].get("deletionTimestamp"))
        if len(valid) < len(reserved) or (deleting and not valid and podclaims.has_finalizer(claim)):
            claim = self._release(claim, valid)
        if not valid:
            self._delete_if_unneeded(claim, pods)

    def _release(self, claim: JSON, valid: list[JSON]) -> JSON:
        """Drop stale reservations; with none left, deallocate (the devices become free for other
        claims) and then remove the finalizer that kept the claim while it was allocated."""
        updated = copy.deepcopy(claim)
        status = updated.setdefault("status", {})
        changed = len(valid) < len(podclaims.reserved_for(claim))
        if changed:
            status["reservedFor"] = valid or None
        if not valid and podclaims.has_finalizer(claim) and status.get("allocation") is not None:
            status["allocation"] = None
            status["devices"] = None  # the drivers' device status goes with the allocation
            changed = True
        if changed:
            updated = self._update_status(updated)
            self.echo(f"resource claim {'/'.join(_key(claim))}: released")
        if podclaims.has_finalizer(updated) and podclaims.allocation(updated) is None:
            updated["metadata"]["finalizers"] = [
                f for f in updated["metadata"].get("finalizers") or [] if f != podclaims.FINALIZER
            ]
            updated = self._update(updated)
        return updated

    def _delete_if_unneeded(self, claim: JSON, pods: dict[tuple[str, str], JSON]) -> None:
        """A claim generated for a pod that will not run (syncClaim), or whose pod is gone (the
        garbage collector's part), is deleted."""
        if claim["metadata"].get("deletionTimestamp"):
            return
        pod_name, pod_uid = podclaims.owning_pod(claim)
        if not pod_name:
            return
        namespace = str(claim["metadata"].get("namespace", ""))
        pod = pods.get((namespace, pod_name))
        if pod is not None:
            gone = str(pod["metadata"].get("uid")) != pod_uid or podclaims.is_pod_done(pod)
        else:
            gone = self._pod_gone_or_replaced(namespace, pod_name, pod_uid)
        if gone:
            self.resource.delete_namespaced_resource_claim(
                claim["metadata"]["name"],
                namespace,
                body={"preconditions": {"uid": claim["metadata"].get("uid")}},
                _preload_content=False,
                _request_timeout=5,
            )
            self.echo(f"resource claim {namespace}/{claim['metadata']['name']}: deleted (its pod is gone)")

    # ---- writes --------------------------------------------------------------------------------
    def _update_status(self, claim: JSON) -> JSON:
        resp = self.resource.replace_namespaced_resource_claim_status(
            claim["metadata"]["name"],
            claim["metadata"]["namespace"],
            claim,
            _preload_content=False,
            _request_timeout=5,
        )
        return dict(json.loads(resp.data))

    def _update(self, claim: JSON) -> JSON:
        resp = self.resource.replace_namespaced_resource_claim(
            claim["metadata"]["name"],
            claim["metadata"]["namespace"],
            claim,
            _preload_content=False,
            _request_timeout=5,
        )
        return dict(json.loads(resp.data))
