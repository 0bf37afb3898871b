"""The API verbs (get, list, watch, create, update, patch, delete, bind) over the store, with
admission and the type strategies, independent of HTTP."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.apiserver import (
    apply,
    conversion,
    defaults,
    errors,
    events,
    managedfields,
    metadata,
    objects,
    patches,
    policies,
    resource_strategy,
    scale,
    schemas,
)
from sim.apiserver.admission import Admission, Attributes
from sim.apiserver.errors import ApiError
from sim.apiserver.identities import Identity
from sim.apiserver.params import whole_number
from sim.apiserver.resources import BY_KEY, ResourceType
from sim.apiserver.selectors import exact_field, labels_of, parse_fields, parse_labels
from sim.apiserver.store import Store, Table, WatchEvent
from sim.apiserver.trees import clone

log = logging.getLogger("sim.apiserver")
NAMESPACES = BY_KEY[("", "namespaces")]
# kube-apiserver's NamespaceLifecycle admission refuses to delete these.
IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")
PODS = BY_KEY[("", "pods")]


@dataclass
class Request:
    """One API call, already routed: who, what, and the query options that matter."""

    user: Identity
    rt: ResourceType
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    dry_run: bool = False
    field_validation: str = "Warn"  # Strict: unknown or duplicate fields are a 400; Warn: warnings
    duplicate_fields: list[str] = field(default_factory=list)  # keys the JSON body repeats
    field_manager: str = ""  # the fieldManager query parameter
    user_agent: str = ""
    force: bool | None = None  # the force query parameter (apply only)

    @property
    def manager(self) -> str:
        """Who managedFields credits this write to: fieldManager, else the User-Agent's product."""
        return self.field_manager or managedfields.manager_from_user_agent(self.user_agent)

    def check_manager(self, options_kind: str) -> None:
        if self.field_manager:
            managedfields.check_manager(options_kind, self.field_manager)

    def check_fields(self, obj: dict[str, Any], warnings: list[str]) -> None:
        """Server-side field validation of a decoded body, as kube-apiserver's strict decoder does."""
        model = schemas.model_of(self.rt)
        if self.field_validation == "Ignore" or model is None:
            return
        problems = [f'duplicate field "{k}"' for k in self.duplicate_fields]
        problems += schemas.describe_unknown(schemas.unknown_fields(model, obj))
        if not problems:
            return
        if self.field_validation == "Strict":
            kind, version = self.rt.kind, self.rt.version
            raise ApiError(
                400,
                f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding '
                f"error: {', '.join(problems)}",
                "BadRequest",
            )
        warnings.extend(problems)


@dataclass
class WatchOptions:
    """The query options of a watch (metav1.ListOptions with watch=true)."""

    resource_version: str = ""
    resource_version_match: str = ""
    send_initial_events: bool | None = None
    bookmarks: bool = False
    label_selector: str | None = None
    field_selector: str | None = None
    timeout: float = 1800.0
    bookmark_interval: float = 60.0  # kube-apiserver's watch cache: about once a minute

    def validate(self) -> None:
        """What kube-apiserver refuses in watch options, with its wording (422 on ListOptions)."""
        problems = []
        match = self.resource_version_match
        if self.send_initial_events is not None and match != "NotOlderThan":
            problems.append(
                (
                    "resourceVersionMatch",
                    ("Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"),
                )
            )
        if match:
            if self.send_initial_events is None:
                problems.append(
                    (
                        "resourceVersionMatch",
                        (
                            "Forbidden: resourceVersionMatch is forbidden for "
                            "watch unless sendInitialEvents is provided"
                        ),
                    )
                )
            if match != "NotOlderThan":
                problems.append(
                    (
                        "resourceVersionMatch",
                        (f'Unsupported value: "{match}": supported values: "NotOlderThan"'),
                    )
                )
        if problems:
            text = ", ".join(f"{f}: {m}" for f, m in problems)
            raise ApiError(
                422,
                f'ListOptions.meta.k8s.io "" is invalid: {text}',
                "Invalid",
                {
                    "group": "meta.k8s.io",
                    "kind": "ListOptions",
                    "causes": [
                        {"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in problems
                    ],
                },
            )


@dataclass
class Result:
    obj: dict[str, Any]
    code: int = 200
    warnings: tuple[str, ...] = ()


class Registry:
    def __init__(self, store: Store, admission: Admission, reap_after_grace: bool = True):
        self.store = store
        self.admission = admission
        self.reap_after_grace = reap_after_grace
        self._pending_deletions: dict[tuple[str, str], float] = {}
        self._deletions_lock = threading.Lock()
        # resource plural -> watches being served from a fixed starting point: what kube-apiserver
        # reports as apiserver_longrunning_requests{verb="WATCH"}; tests wait on it before a change
        # that a watch started at "now" must see.
        self.open_watches: dict[str, int] = {}

    # ---- reads ---------------------------------------------------------------------------------
    def get(self, req: Request) -> dict[str, Any]:
        """The object as the request's API serves it."""
        return conversion.served(req.rt, self._stored(req))

    def _stored(self, req: Request) -> dict[str, Any]:
        with self.store.lock:
            obj = self.store.table(req.rt).get(req.namespace, req.name)
        if obj is None:
            raise errors.not_found(req.rt.plural, req.rt.group, req.name)
        return obj

    def _matcher(
        self, rt: ResourceType, label_selector: str | None, field_selector: str | None
    ) -> Callable[[dict[str, Any] | None], bool]:
        labels = parse_labels(label_selector)
        fields = parse_fields(field_selector, rt.field_labels, dict(rt.field_paths))

        def match(obj: dict[str, Any] | None) -> bool:
            if obj is None:
                return False
            if labels and not labels(labels_of(obj)):
                return False
            return not fields or fields(obj)

        return match

    def list(
        self,
        req: Request,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        cont: str = "",
    ) -> dict[str, Any]:
        match = self._matcher(req.rt, label_selector, field_selector)
        ns = req.namespace or (
            exact_field(field_selector, "metadata.namespace") if req.rt.namespaced else None
        )
        with self.store.lock:
            items = self.store.table(req.rt).items(ns if req.rt.namespaced else None)
            rv = self.store.rv
        items = [conversion.served(req.rt, o) for o in items if match(o)]
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if cont:
            after = _continue_key(cont)
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > after]
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            meta["continue"] = json.dumps([last.get("namespace", ""), last["name"]])
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return {
            "kind": req.rt.list_kind,
            "apiVersion": req.rt.group_version,
            "metadata": meta,
            "items": items,
        }

    # ---- watch ---------------------------------------------------------------------------------
    def watch(
        self,
        req: Request,
        send: Callable[[list[dict[str, Any]]], None],
        opts: WatchOptions,
        stopped: Callable[[], bool],
    ) -> None:
        """Stream watch events to `send` until timeout, stop, or the client goes away (send raises).

        resourceVersion semantics are kube-apiserver's: unset or "0" starts at the current state
        with synthetic ADDED events for what exists; a specific version starts right after it (410
        Gone once compacted). `sendInitialEvents=true` (the WatchList protocol, with
        `resourceVersionMatch=NotOlderThan`) sends the current state as ADDED events and then one
        BOOKMARK annotated `k8s.io/initial-events-end`; `sendInitialEvents=false` sends no state.
        With `allowWatchBookmarks`, a BOOKMARK carries the current resourceVersion every
        `opts.bookmark_interval` seconds and 2 s before the watch times out.
        """
        opts.validate()
        match = self._matcher(req.rt, opts.label_selector, opts.field_selector)
        if req.name:
            base = match

            def match(o):
                return base(o) and o["metadata"]["name"] == req.name

        ns = req.namespace if req.rt.namespaced and req.namespace else None
        table = self.store.table(req.rt)
        initial: list[dict[str, Any]] = []
        rv = opts.resource_version
        with self.store.lock:
            if opts.send_initial_events is True:
                if rv not in ("", "0") and _parse_rv(rv) > self.store.rv:
                    raise ApiError(
                        504,
                        f"Too large resource version: {rv}, current: {self.store.rv}",
                        "Timeout",
                        {
                            "causes": [
                                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                            ],
                            "retryAfterSeconds": 1,
                        },
                    )
                cursor = self.store.rv
                initial = [
                    {"type": "ADDED", "object": conversion.served(req.rt, o)}
                    for o in table.items(ns)
                    if match(o)
                ]
                if opts.bookmarks:
                    initial.append(_bookmark(req.rt, cursor, initial_events_end=True))
            elif rv in ("", "0"):
                cursor = self.store.rv
                if opts.send_initial_events is None:
                    initial = [
                        {"type": "ADDED", "object": conversion.served(req.rt, o)}
                        for o in table.items(ns)
                        if match(o)
                    ]
            else:
                cursor = _parse_rv(rv)
                if cursor < table.compacted_rv:
                    raise errors.gone(f"too old resource version: {cursor} ({table.compacted_rv})")
            self.open_watches[req.rt.plural] = self.open_watches.get(req.rt.plural, 0) + 1
        try:
            self._stream(req, send, opts, stopped, match, ns, table, initial, cursor)
        finally:
            with self.store.lock:
                self.open_watches[req.rt.plural] -= 1

    def _stream(
        self,
        req: Request,
        send: Callable[[list[dict[str, Any]]], None],
        opts: WatchOptions,
        stopped: Callable[[], bool],
        match: Callable[[dict[str, Any] | None], bool],
        ns: str | None,
        table: Table,
        initial: list[dict[str, Any]],
        cursor: int,
    ) -> None:
        """The body of a watch once its starting point (`cursor`) is fixed."""
        send(initial)  # answers the headers now, even with nothing to report yet
        now = time.monotonic()
        deadline = now + opts.timeout
        next_bookmark = now + opts.bookmark_interval
        last_bookmark_due = deadline - 2 if opts.timeout > 2 else None
        while not stopped():
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                break
            wake = min(remaining, 0.5)
            if opts.bookmarks:
                due = min(next_bookmark, last_bookmark_due or next_bookmark)
                wake = min(wake, max(0.0, due - now))
            with self.store.lock:
                if cursor < table.compacted_rv:
                    send([_expired(cursor, table.compacted_rv)])
                    return
                changes = table.events_after(cursor)
                if not changes and wake > 0:
                    table.changed.wait(wake)
                    changes = table.events_after(cursor)
                # with no events of this type, nothing of it happened up to the store's version
                cursor = changes[-1].rv if changes else max(cursor, self.store.rv)
            out = [e for e in (_translate(req.rt, ev, match, ns) for ev in changes) if e]
            now = time.monotonic()
            if (
                opts.bookmarks
                and not changes
                and (now >= next_bookmark or (last_bookmark_due is not None and now >= last_bookmark_due))
            ):
                out.append(_bookmark(req.rt, cursor))
                next_bookmark = now + opts.bookmark_interval
                if last_bookmark_due is not None and now >= last_bookmark_due:
                    last_bookmark_due = None
            if stopped():  # a connection cut while waiting carries nothing that happened after the cut
                break
            if out:
                send(out)

    # ---- writes --------------------------------------------------------------------------------
    def _require_namespace(self, req: Request, name: str = "") -> None:
        """The NamespaceLifecycle admission rules for a create: the namespace exists and is not
        being terminated."""
        if not req.rt.namespaced:
            return
        ns = self.store.table(NAMESPACES).get("", req.namespace)
        if ns is None:
            raise errors.not_found("namespaces", "", req.namespace)
        if ns["metadata"].get("deletionTimestamp"):
            message = (
                f"unable to create new content in namespace {req.namespace} because it is being terminated"
            )
            err = errors.forbidden(req.rt.plural, req.rt.group, name, message)
            err.details = {
                **(err.details or {}),
                "causes": [
                    {"reason": "NamespaceTerminating", "message": message, "field": "metadata.namespace"}
                ],
            }
            raise err

    def _admit(
        self,
        req: Request,
        operation: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
        name: str,
        warnings: list[str],
        kind: dict[str, str] | None = None,
        phase: str = "both",
    ) -> dict[str, Any] | None:
        attrs = Attributes(
            operation,
            req.rt,
            req.subresource,
            name,
            req.namespace,
            obj,
            old,
            req.user,
            req.dry_run,
            kind or {},
        )
        out, warns = self.admission.admit(attrs, phase)
        warnings.extend(warns)
        return out

    def create(self, req: Request, body: Any, managed: bool = True) -> Result:
        """Create; `managed=False` when the body already carries its managedFields (an apply)."""
        rt = req.rt
        if managed:
            req.check_manager("CreateOptions")
        if not isinstance(body, dict):
            raise ApiError(400, f"the body of a {rt.kind} create must be a JSON object")
        warnings: list[str] = []
        req.check_fields(body, warnings)
        objects.canonicalize_quantities(rt, body)  # decoding: admission sees canonical quantities
        if rt.key == PODS.key:
            defaults.pod(body)  # decoding: admission sees a defaulted pod
        if conversion.is_event(rt):
            events.decode(rt.group, conversion.to_storage(rt, body))
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != req.namespace:
            raise ApiError(
                400, "the namespace of the provided object does not match the namespace sent on the request"
            )
        if not meta.get("name") and not meta.get("generateName"):
            raise invalid_name(rt)
        requested_name = meta.get("name", "")
        with self.store.lock:
            self._require_namespace(req, requested_name)
        if managed and req.manager:
            # the field manager runs before mutating admission: a webhook's changes are nobody's
            body = managedfields.record_update(rt, None, body, req.manager, req.subresource)
        body = self._admit(req, "CREATE", body, None, requested_name, warnings, phase="mutate") or body
        obj = clone(body)
        obj_meta = obj.setdefault("metadata", {})
        if not obj_meta.get("name"):
            obj_meta["name"] = objects.generate_name(obj_meta["generateName"])
        objects.check_name(rt, obj_meta["name"])
        obj = objects.prepare_create(rt, obj, req.namespace)
        resource_strategy.prepare_create(rt, obj)
        policies.check_config(rt, obj)
        resource_strategy.validate(rt, obj, None)
        record = conversion.to_storage(rt, obj)
        if conversion.is_event(rt):
            events.validate_create(rt.group, record)
        self._admit(req, "CREATE", obj, None, requested_name, warnings, phase="validate")
        with self.store.lock:
            self._require_namespace(req, obj_meta["name"])
            if self.store.table(rt).get(req.namespace, obj_meta["name"]) is not None:
                raise errors.already_exists(rt.plural, rt.group, obj_meta["name"])
            if req.dry_run:
                return Result(obj, 201, tuple(warnings))
            stored = self.store.commit(rt, req.namespace, obj_meta["name"], record, "ADDED")
        return Result(conversion.served(rt, stored or record), 201, tuple(warnings))

    def update(self, req: Request, body: Any) -> Result:
        req.check_manager("UpdateOptions")
        if not isinstance(body, dict):
            raise ApiError(400, f"the body of a {req.rt.kind} update must be a JSON object")
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != req.name:
            raise ApiError(
                400,
                f"the name of the object ({meta['name']}) does not match the name on the URL ({req.name})",
            )
        return self._write(req, lambda current: body, str(meta.get("resourceVersion") or ""))

    def patch(self, req: Request, content_type: str, raw: bytes) -> Result:
        ctype = content_type.split(";")[0].strip()
        if ctype == patches.APPLY_PATCH:
            return self.apply(req, raw)
        if req.force is not None:
            raise apply.forbidden_force()
        req.check_manager("PatchOptions")
        try:
            doc = json.loads(raw or b"null")
        except ValueError as exc:
            raise ApiError(400, f"the patch body is not valid JSON: {exc}") from exc
        if ctype not in (patches.JSON_PATCH, patches.MERGE_PATCH, patches.STRATEGIC_PATCH):
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {patches.JSON_PATCH}, {patches.MERGE_PATCH}, "
                f"{patches.STRATEGIC_PATCH}",
            )
        if ctype != patches.JSON_PATCH and not isinstance(doc, dict):
            raise ApiError(400, "a merge patch must be a JSON object")

        def patched(current: dict[str, Any]) -> dict[str, Any]:
            try:
                if ctype == patches.JSON_PATCH:
                    return patches.apply_json_patch(current, doc)
                if ctype == patches.MERGE_PATCH:
                    return patches.apply_merge_patch(current, doc)
                return patches.apply_strategic_merge_patch(current, doc)
            except patches.PatchError as exc:
                raise ApiError(422, str(exc), "Invalid") from exc

        return self._write(req, patched, None)

    def apply(self, req: Request, raw: bytes) -> Result:
        """Server-side apply: `raw` (YAML or JSON) merged over the object by field ownership, the
        object created when it does not exist (managedfields.py has the rules)."""
        if not req.field_manager:
            raise apply.required_manager()
        req.check_manager("PatchOptions")
        config = apply.decode(raw)
        apply.check_object(req.rt, config, req.namespace, req.name)
        # no fieldValidation here: a field the kind does not declare is always an error of apply's
        warnings: list[str] = []
        objects.canonicalize_quantities(req.rt, config)
        force = bool(req.force)
        with self.store.lock:
            exists = self.store.table(req.rt).get(req.namespace, req.name) is not None
        if not exists:
            new = managedfields.apply(req.rt, None, config, req.field_manager, force, req.subresource)
            new.setdefault("metadata", {})["name"] = req.name
            try:
                result = self.create(req, new, managed=False)
            except ApiError as err:
                if err.code != 409 or err.reason != "AlreadyExists":
                    raise
            else:
                return Result(result.obj, result.code, (*warnings, *result.warnings))

        def merge(current: dict[str, Any]) -> dict[str, Any]:
            return managedfields.apply(req.rt, current, config, req.field_manager, force, req.subresource)

        result = self._write(req, merge, None, managed=False)
        return Result(result.obj, result.code, (*warnings, *result.warnings))

    def scale(
        self, req: Request, change: Callable[[dict[str, Any]], tuple[int, str]], pinned: str = ""
    ) -> Result:
        """A write through the `scale` subresource: `change(current)` gives (replicas, the
        resourceVersion the Scale names or ""); only spec.replicas changes. The answer is the Scale."""

        def make(current: dict[str, Any]) -> dict[str, Any]:
            replicas, named = change(current)
            new = scale.scaled(current, replicas)
            if named:
                new["metadata"] = {**current["metadata"], "resourceVersion": named}
            return new

        result = self._write(req, make, pinned or None)
        return Result(scale.view(result.obj), result.code, result.warnings)

    def _write(
        self,
        req: Request,
        make: Callable[[dict[str, Any]], dict[str, Any]],
        expected_rv: str | None,
        managed: bool = True,
    ) -> Result:
        """Read-modify-write with optimistic concurrency, retried when someone else wrote between
        our read and our commit (unless the client pinned a resourceVersion: then 409)."""
        rt = req.rt
        for _ in range(20):
            current = self.get(req)
            new = make(current)  # the patches never mutate it; prepare_update copies
            if not isinstance(new, dict):
                raise ApiError(422, "the patched object is not a JSON object", "Invalid")
            field_warnings: list[str] = []
            req.check_fields(new, field_warnings)
            # A PUT pins the version it read; a patch only when it names another version.
            pinned = expected_rv or ""
            named = str((new.get("metadata") or {}).get("resourceVersion") or "")
            if (pinned or named) and (pinned or named) != current["metadata"]["resourceVersion"]:
                raise errors.conflict(rt.plural, rt.group, req.name)
            applied_owners = _owners(new)
            new = objects.prepare_update(rt, new, current, req.subresource)
            resource_strategy.prepare_update(rt, new, current, req.subresource)
            resource_strategy.validate(rt, new, current, req.subresource)
            if not managed:  # an apply: its managedFields, even where the status endpoint keeps metadata
                _set_owners(new, applied_owners)
            policies.check_config(rt, new)
            if managed and req.manager:
                new = managedfields.record_update(rt, current, new, req.manager, req.subresource)
            if objects.same_content(new, current) and _owners(new) == _owners(current):
                return Result(current)
            warnings = field_warnings
            new = self._admit(req, "UPDATE", new, current, req.name, warnings) or new
            record = self._record_update(rt, new, current)
            with self.store.lock:
                latest = self.store.table(rt).get(req.namespace, req.name)
                if latest is None:
                    raise errors.not_found(rt.plural, rt.group, req.name)
                if latest["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
                    if pinned:
                        raise errors.conflict(rt.plural, rt.group, req.name)
                    continue
                if req.dry_run:
                    return Result(new, 200, tuple(warnings))
                meta = new["metadata"]
                if (
                    meta.get("deletionTimestamp")
                    and not meta.get("finalizers")
                    and not meta.get("deletionGracePeriodSeconds")
                ):
                    gone = self.store.commit(rt, req.namespace, req.name, None, "DELETED")
                    return Result(conversion.served(rt, gone) if gone else new, 200, tuple(warnings))
                stored = self.store.commit(rt, req.namespace, req.name, record, "MODIFIED")
            return Result(conversion.served(rt, stored or record), 200, tuple(warnings))
        raise errors.conflict(rt.plural, rt.group, req.name)

    @staticmethod
    def _record_update(rt: ResourceType, new: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
        """The stored form of an update, after the type's decoding and validation of it."""
        record = conversion.to_storage(rt, new)
        if conversion.is_event(rt):
            events.decode(rt.group, record)
            events.validate_update(rt.group, record, conversion.to_storage(rt, current))
        return record

    def bind(self, req: Request, body: Any) -> Result:
        """pods/binding, as kube-apiserver's binding storage does it (checked against
        pkg/registry/core/pod/storage: BindingREST.Create and its update of the pod): one write sets
        spec.nodeName, merges the Binding's annotations over the pod's and sets PodScheduled=True,
        so watchers see one MODIFIED event and one resourceVersion bump.

        Refusals, in the real order: an undecodable body 400; a namespace or name that differs
        from the URL's 400; a target that is not a named Node 500 (the real server returns its
        validation list as a plain error, which the handler answers as an internal error with no
        reason); a missing pod 404; a Binding whose metadata.uid or resourceVersion is not the
        pod's 409 Conflict on pods (the storage precondition's message); a pod being deleted,
        already bound or still gated 409 Conflict on pods/binding. The node is not looked up, and
        the Binding's annotations are not validated: the real server copies them as they are."""
        binding = _decode_binding(body, req.namespace, req.name)
        pod_name = binding["metadata"]["name"]
        preq = Request(req.user, PODS, req.namespace, pod_name, "binding", req.dry_run)
        warnings: list[str] = []
        binding = (
            self._admit(
                preq,
                "CREATE",
                binding,
                None,
                pod_name,
                warnings,
                {"group": "", "version": "v1", "kind": "Binding"},
            )
            or binding
        )
        meta = binding.get("metadata") or {}
        with self.store.lock:
            pod = self.get(preq)
            _check_preconditions(pod, str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
            refusal = _unbindable(pod)
            if refusal:
                raise ApiError(
                    409,
                    f'Operation cannot be fulfilled on pods/binding "{pod_name}": {refusal}',
                    "Conflict",
                    {"name": pod_name, "kind": "pods/binding"},
                )
            new = clone(pod)
            new["spec"]["nodeName"] = binding["target"]["name"]
            annotations = meta.get("annotations")
            if annotations:
                merged = new["metadata"].get("annotations") or {}
                merged.update({k: v or "" for k, v in annotations.items()})
                new["metadata"]["annotations"] = merged
            _set_scheduled(new.setdefault("status", {}))
            if not req.dry_run:
                self.store.commit(PODS, req.namespace, pod_name, new, "MODIFIED")
        return Result(errors.status_object(201, "", "", ok=True), 201, tuple(warnings))

    def delete(self, req: Request, options: dict[str, Any]) -> Result:
        rt = req.rt
        current = self.get(req)
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
            raise ApiError(
                409,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object "
                f"meta: {current['metadata']['uid']}",
                "Conflict",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Precondition failed: ResourceVersion in precondition: "
                f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                f"{current['metadata']['resourceVersion']}",
                "Conflict",
            )
        if rt.key == NAMESPACES.key and req.name in IMMORTAL_NAMESPACES:
            raise errors.forbidden("namespaces", "", req.name, "this namespace may not be deleted")
        warnings: list[str] = []
        self._admit(req, "DELETE", None, current, req.name, warnings)
        grace = self._grace(rt, current, options)
        with self.store.lock:
            current = self._stored(req)
            if req.dry_run:
                return Result(conversion.served(rt, current), 200, tuple(warnings))
            if rt.key == NAMESPACES.key:
                return Result(self._delete_namespace(current), 200, tuple(warnings))
            meta = current["metadata"]
            if grace > 0 or meta.get("finalizers"):
                new = clone(current)
                nmeta = new["metadata"]
                deadline = time.time() + grace
                if not nmeta.get("deletionTimestamp") or grace < (
                    nmeta.get("deletionGracePeriodSeconds") or 0
                ):
                    nmeta["deletionTimestamp"] = objects.rfc3339(deadline)
                    if rt.key == PODS.key:
                        nmeta["deletionGracePeriodSeconds"] = grace
                stored = self.store.commit(rt, req.namespace, req.name, new, "MODIFIED")
                if rt.key == PODS.key and grace > 0:
                    with self._deletions_lock:
                        self._pending_deletions[(req.namespace, req.name)] = deadline
                return Result(conversion.served(rt, stored or new), 200, tuple(warnings))
            gone = self.store.commit(rt, req.namespace, req.name, None, "DELETED")
        return Result(conversion.served(rt, gone or current), 200, tuple(warnings))

    def _delete_namespace(self, ns: dict[str, Any]) -> dict[str, Any]:
        """A namespace with finalizers turns Terminating (the namespace controller then empties and
        removes it: sync_namespaces); deleting it again while it terminates is a 409, as in
        kube-apiserver. Caller holds the store lock."""
        meta, name = ns["metadata"], ns["metadata"]["name"]
        spec_finalizers = (ns.get("spec") or {}).get("finalizers")
        if not meta.get("deletionTimestamp") and (spec_finalizers or meta.get("finalizers")):
            new = clone(ns)
            new["metadata"]["deletionTimestamp"] = objects.now()
            new.setdefault("status", {})["phase"] = "Terminating"
            return self.store.commit(NAMESPACES, "", name, new, "MODIFIED") or new
        if spec_finalizers:
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on namespaces "{name}": The system is ensuring '
                "all content is removed from this namespace.  Upon completion, this namespace "
                "will automatically be purged by the system.",
                "Conflict",
                {"name": name, "kind": "namespaces"},
            )
        if meta.get("finalizers"):
            return ns
        gone = self.store.commit(NAMESPACES, "", name, None, "DELETED")
        self._delete_namespace_contents(name)
        return gone or ns

    def sync_namespaces(self, controller: Identity) -> None:
        """The namespace controller's pass: in each Terminating namespace delete every object
        (pods gracefully, with their own grace period), and remove the namespace once it is empty."""
        with self.store.lock:
            terminating = [
                n["metadata"]["name"]
                for n in self.store.table(NAMESPACES).items(None)
                if n["metadata"].get("deletionTimestamp")
            ]
        for ns in terminating:
            for rt, name in self._contents(ns, only_live=True):
                try:
                    self.delete(Request(controller, rt, ns, name), {})
                except ApiError as err:
                    if err.code != 404:
                        log.info(
                            "namespace %s: cannot delete %s %s yet: %s", ns, rt.plural, name, err.message
                        )
            with self.store.lock:
                current = self.store.table(NAMESPACES).get("", ns)
                if current is None or self._contents(ns) or current["metadata"].get("finalizers"):
                    continue
                final = clone(current)
                final.setdefault("spec", {})["finalizers"] = []
                self.store.commit(NAMESPACES, "", ns, final, "MODIFIED")
                self.store.commit(NAMESPACES, "", ns, None, "DELETED")

    def _contents(self, ns: str, only_live: bool = False) -> list[tuple[ResourceType, str]]:
        with self.store.lock:
            return [
                (t.rt, o["metadata"]["name"])
                for t in self.store.tables.values()
                if t.rt.namespaced
                for o in t.items(ns)
                if not (only_live and o["metadata"].get("deletionTimestamp"))
            ]

    def _grace(self, rt: ResourceType, obj: dict[str, Any], options: dict[str, Any]) -> int:
        """The pod strategy's grace period: the one asked for, else the pod's own; 0 for a pod not
        bound to a node or already finished; other kinds are deleted at once."""
        asked = options.get("gracePeriodSeconds")
        if asked is not None and type(asked) is not int:
            raise ApiError(400, f"gracePeriodSeconds={str(asked)[:32]!r}: a whole number of seconds")
        if rt.key != PODS.key:
            return 0
        if not obj.get("spec", {}).get("nodeName") or obj.get("status", {}).get("phase") in (
            "Succeeded",
            "Failed",
        ):
            return 0
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = obj.get("spec", {}).get("terminationGracePeriodSeconds", 30)
        if type(grace) is not int:
            grace = 30
        return 1 if grace < 0 else grace  # kube-apiserver turns a negative grace period into 1

    def _delete_namespace_contents(self, ns: str) -> None:
        for table in self.store.tables.values():
            if table.rt.namespaced:
                for obj in table.items(ns):
                    self.store.commit(table.rt, ns, obj["metadata"]["name"], None, "DELETED")

    def finish_deletions(self, only_expired: bool = False) -> int:
        """Remove pods whose graceful deletion is pending (all, or those past their grace period),
        as the kubelet does once the containers have stopped. Returns how many went away."""
        now = time.time()
        with self._deletions_lock:
            due = [k for k, t in self._pending_deletions.items() if not only_expired or t <= now]
            for k in due:
                del self._pending_deletions[k]
        done = 0
        with self.store.lock:
            table = self.store.table(PODS)
            for ns, name in due:
                pod = table.get(ns, name)
                if pod and pod["metadata"].get("deletionTimestamp") and not pod["metadata"].get("finalizers"):
                    self.store.commit(PODS, ns, name, None, "DELETED")
                    done += 1
        return done


def _owners(obj: dict[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("managedFields")


def _set_owners(obj: dict[str, Any], owners: Any) -> None:
    meta = obj.setdefault("metadata", {})
    if owners:
        meta["managedFields"] = owners
    else:
        meta.pop("managedFields", None)


def invalid_name(rt: ResourceType) -> ApiError:
    return errors.invalid(
        rt.kind, rt.group, "", "metadata.name", "Required value: name or generateName is required"
    )


def _continue_key(token: str) -> tuple[str, str]:
    """The (namespace, name) a list continues after; a token this server did not issue is a 400."""
    try:
        key = json.loads(token)
    except (ValueError, RecursionError):
        key = None
    if not (isinstance(key, list) and len(key) == 2 and all(isinstance(k, str) for k in key)):
        raise ApiError(400, "continue key is not valid: pass the metadata.continue of the previous page")
    return key[0], key[1]


def _parse_rv(rv: str) -> int:
    return whole_number("resourceVersion", rv)


def _bookmark(rt: ResourceType, rv: int, initial_events_end: bool = False) -> dict[str, Any]:
    """A BOOKMARK event: an object of the watched kind carrying only its resourceVersion."""
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_events_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.group_version, "metadata": meta}}


def _expired(cursor: int, compacted: int) -> dict[str, Any]:
    return {
        "type": "ERROR",
        "object": errors.gone(f"too old resource version: {cursor} ({compacted})").status(),
    }


def _translate(
    rt: ResourceType, ev: WatchEvent, match: Callable[[dict[str, Any] | None], bool], ns: str | None
) -> dict[str, Any] | None:
    """What a watcher of `rt` (in namespace `ns`, with selectors `match`) is sent for a change."""
    if ns is not None and ev.obj["metadata"].get("namespace", "") != ns:
        return None
    serve = conversion.server(rt)
    version = rt.group_version if serve else ""
    if ev.type == "DELETED":
        return ev.frame("DELETED", version, serve) if match(ev.old) else None
    now_ok = match(ev.obj)
    if ev.type == "ADDED":
        return ev.frame("ADDED", version, serve) if now_ok else None
    was_ok = match(ev.old)
    if now_ok and was_ok:
        return ev.frame("MODIFIED", version, serve)
    if now_ok:
        return ev.frame("ADDED", version, serve)
    if was_ok and ev.old is not None:
        old = {
            **ev.old,
            "metadata": {**ev.old["metadata"], "resourceVersion": ev.obj["metadata"]["resourceVersion"]},
        }
        return {"type": "DELETED", "object": conversion.served(rt, old)}
    return None


def _decode_binding(body: Any, namespace: str, url_name: str) -> dict[str, Any]:
    """The Binding as the real decoder and create handler accept it (see Registry.bind)."""
    if not isinstance(body, dict):
        raise ApiError(
            400, 'Binding in version "v1" cannot be handled as a Binding: the body is not a JSON object'
        )
    metadata.decode_annotations("Binding", "v1", body.get("metadata"))
    target = body.get("target")
    if target is not None and not isinstance(target, dict):
        raise ApiError(
            400,
            'Binding in version "v1" cannot be handled as a Binding: json: cannot unmarshal '
            "into Go struct field Binding.target of type v1.ObjectReference",
        )
    binding = {"apiVersion": "v1", "kind": "Binding", **body}
    meta = binding["metadata"] = dict(body.get("metadata") or {})
    if meta.get("namespace") and meta["namespace"] != namespace:
        raise ApiError(
            400, "the namespace of the provided object does not match the namespace sent on the request"
        )
    meta["namespace"] = namespace
    name = str(meta.get("name") or "")
    if url_name and name != url_name:
        raise ApiError(400, "name in URL does not match name in Binding object")
    target = target or {}
    problems = []
    if target.get("kind") not in (None, "", "Node"):
        problems.append(
            f'target.kind: Unsupported value: {json.dumps(str(target["kind"])[:64])}: supported values: "Node", "<empty>"'
        )
    if not target.get("name"):
        problems.append("target.name: Required value")
    if problems:
        raise ApiError(500, problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]", "")
    return binding


def _check_preconditions(pod: dict[str, Any], uid: str, resource_version: str) -> None:
    """A Binding's metadata.uid / resourceVersion are storage preconditions on the pod."""
    meta = pod["metadata"]
    if uid and uid != meta["uid"]:
        why = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta['uid']}"
    elif resource_version and resource_version != meta["resourceVersion"]:
        why = (
            f"Precondition failed: ResourceVersion in precondition: {resource_version}, "
            f"ResourceVersion in object meta: {meta['resourceVersion']}"
        )
    else:
        return
    key = f"/registry/pods/{meta['namespace']}/{meta['name']}"
    raise ApiError(
        409,
        f'Operation cannot be fulfilled on pods "{meta["name"]}": StorageError: invalid object, Code: 4, '
        f"Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: {why}",
        "Conflict",
        {"name": meta["name"], "kind": "pods"},
    )


def _unbindable(pod: dict[str, Any]) -> str | None:
    name, spec = pod["metadata"]["name"], pod.get("spec") or {}
    if pod["metadata"].get("deletionTimestamp"):
        return f"pod {name} is being deleted, cannot be assigned to a host"
    if spec.get("nodeName"):
        return f'pod {name} is already assigned to node "{spec["nodeName"]}"'
    if spec.get("schedulingGates"):
        return f"pod {name} has non-empty .spec.schedulingGates"
    return None


def _set_scheduled(status: dict[str, Any]) -> None:
    """PodScheduled=True as the real pod condition helper sets it: replaced in place (reason and
    message cleared), its transition time kept when it already was True."""
    conditions = status.setdefault("conditions", [])
    for i, cond in enumerate(conditions):
        if cond.get("type") == "PodScheduled":
            since = cond.get("lastTransitionTime") if cond.get("status") == "True" else None
            conditions[i] = _scheduled(since or objects.now())
            return
    conditions.append(_scheduled(objects.now()))


def _scheduled(since: str) -> dict[str, Any]:
    return {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": since}
