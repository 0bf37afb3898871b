"""The ownership journal: a durable, node-local record of every MIG instance this plugin created.

A pod's annotation proves who owns a placement only while the pod exists; a plugin that crashes
after its pod was deleted would otherwise find an instance nobody can prove is ours. So before a GI
is created the plugin writes its *intent* here (GPU UUID, profile, placement, pod UID, namespace,
name, container and device index); after the create it adds the GI ID, CI ID and MIG UUID; an entry
goes away only after NVML confirmed the destroy. An instance kept idle for reuse after its pod ended
keeps its entry, with `idleSince` set; handing it to the next pod rewrites the owner durably first.
(A plugin older than idle reuse reads such an entry as an untrusted journal: fail safe.) Every write
is atomic: a temporary file is written and fsync'ed, renamed over the journal, and the directory is
fsync'ed, so a kill -9 or a power loss leaves either the old or the new journal, never half of one.
(The runtime identity added after a create skips the fsyncs, keeping Allocate fast: the rename alone
survives a killed process, and the durable intent already proves the instance; GPU instances do not
outlive an OS crash anyway.)

One writer per node: `hold()` takes an exclusive `flock` on `instances.lock` beside the journal for
the life of the process, before the journal is read or any GPU touched; a second plugin process on
the node (a DaemonSet pod replaced while the old one is still terminating, a restart racing a
process that has not exited yet) waits until the first has exited: the kernel releases the lock
when a process dies, kill -9 included. Two processes would each manage instances the other creates
(one's startup clean-up destroying the other's new instance), and their journal writes would race.

Fail safe: a missing journal proves nothing (first start, or a lost state directory). A journal that
cannot be trusted — not JSON, an unknown version, any invalid entry, larger than `MAX_BYTES` — is
moved aside to `instances.json.corrupt` and proves nothing either: its instances fall back to the
annotation-only rules (never destroyed on a busy GPU, published as occupied). Both say so in a log
line and in `dynmig_plugin_journal_problems_total`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from plugin.metrics import PluginMetrics

log = logging.getLogger("dynmig.plugin.journal")

JOURNAL_FILE = "instances.json"
LOCK_FILE = "instances.lock"  # held by the one plugin process of the node (Journal.hold)
MAX_BYTES = 1 << 20  # a node holds at most a few dozen instances; anything near this is hostile
MAX_ENTRIES = 1024
VERSION = 1
UNKNOWN = "?"  # a create whose pod the caller did not name

Key = tuple[str, str, int, int]  # (GPU UUID, profile, placement start, size)

NonNegative = Annotated[StrictInt, Field(ge=0, le=1 << 31)]
Text = Annotated[StrictStr, Field(min_length=1, max_length=253)]


class JournalError(RuntimeError):
    """The journal could not be written; nothing may be created that it cannot prove."""


@dataclass(frozen=True)
class Owner:
    """The pod (and its device) an instance was created for."""

    pod_uid: str
    namespace: str
    name: str
    container_index: int = 0
    device_index: int = 0

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


class Entry(BaseModel):
    """One instance we created (or are about to create); the runtime part is set after the create."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    gpuUUID: Text
    profile: Text
    start: NonNegative
    size: Annotated[StrictInt, Field(ge=1, le=64)]
    podUID: Text
    namespace: Text
    name: Text
    containerIndex: NonNegative
    deviceIndex: NonNegative
    gpuInstanceID: NonNegative | None = None
    computeInstanceID: NonNegative | None = None
    migUUID: Text | None = None
    # set while the instance is kept idle after its pod ended (Unix seconds): the owner fields then
    # name its last user, whose namespace the reuse rule compares
    idleSince: Annotated[StrictInt, Field(ge=0, le=1 << 34)] | None = None

    @property
    def key(self) -> Key:
        return (self.gpuUUID, self.profile, self.start, self.size)

    @property
    def owner(self) -> Owner | None:
        """The pod it was created for; None when the creator did not say (then the key alone decides)."""
        if self.podUID == UNKNOWN:
            return None
        return Owner(self.podUID, self.namespace, self.name, self.containerIndex, self.deviceIndex)

    @property
    def created(self) -> bool:
        """The create finished and its runtime identity was recorded (else: intent only)."""
        return (
            self.gpuInstanceID is not None and self.computeInstanceID is not None and self.migUUID is not None
        )

    @classmethod
    def intent(cls, key: Key, owner: Owner) -> Entry:
        return cls(
            gpuUUID=key[0],
            profile=key[1],
            start=key[2],
            size=key[3],
            podUID=owner.pod_uid or UNKNOWN,
            namespace=owner.namespace or UNKNOWN,
            name=owner.name or UNKNOWN,
            containerIndex=owner.container_index,
            deviceIndex=owner.device_index,
        )

    def idle(self, since: float | None) -> Entry:
        """The entry kept idle since `since` (Unix seconds), or in use again (None)."""
        return self.model_copy(update={"idleSince": None if since is None else max(0, int(since))})

    def for_owner(self, owner: Owner) -> Entry:
        """The same instance handed over to another pod (in use: no longer idle)."""
        return self.model_copy(
            update={
                "podUID": owner.pod_uid or UNKNOWN,
                "namespace": owner.namespace or UNKNOWN,
                "name": owner.name or UNKNOWN,
                "containerIndex": owner.container_index,
                "deviceIndex": owner.device_index,
                "idleSince": None,
            }
        )

    def with_runtime(self, gi_id: int, ci_id: int, mig_uuid: str) -> Entry:
        return self.model_copy(
            update={"gpuInstanceID": gi_id, "computeInstanceID": ci_id, "migUUID": mig_uuid}
        )


class JournalFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    entries: Annotated[list[Entry], Field(max_length=MAX_ENTRIES)]


def decode(text: str | bytes) -> list[Entry]:
    """Entries of a journal text; ValueError naming the problem on any invalid part (pure)."""
    if len(text) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES} bytes")
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise ValueError(f"not JSON: {error}") from None
    try:
        doc = JournalFile.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{where or 'document'}: {first['msg']}") from None
    keys = [e.key for e in doc.entries]
    if len(set(keys)) != len(keys):
        raise ValueError("two entries for the same GPU, profile and placement")
    return doc.entries


def encode(entries: Iterable[Entry]) -> str:
    ordered = sorted(entries, key=lambda e: e.key)
    return json.dumps(
        {"version": VERSION, "entries": [e.model_dump(exclude_none=True) for e in ordered]},
        separators=(",", ":"),
        sort_keys=True,
    )


class Journal:
    """The journal of one node. `path` None keeps it in memory only (embedded use without a state dir)."""

    def __init__(self, state_dir: Path | None, metrics: PluginMetrics | None = None):
        self.path = state_dir / JOURNAL_FILE if state_dir is not None else None
        self.metrics = metrics or PluginMetrics()
        self.status = "unloaded"  # after load: ok, missing, corrupt, memory
        self._entries: dict[Key, Entry] = {}
        self._lock = threading.Lock()
        self._held: int | None = None  # the open lock file while this process is the node's writer

    # ---- the one writer

    def hold(self, block: bool = True) -> bool:
        """Become the node's one journal writer (see the module doc); waits while another process
        is. False only with `block` False and the lock taken; True at once without a state dir."""
        if self.path is None or self._held is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not block:
                os.close(fd)
                return False
            log.warning(
                "another device plugin process holds %s: waiting for it to exit before touching "
                "the journal or any GPU",
                self.path.with_name(LOCK_FILE),
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
        self._held = fd
        return True

    def release(self) -> None:
        """No longer the node's writer (a stopping plugin, after its last write)."""
        if self._held is not None:
            os.close(self._held)  # closing the descriptor drops the flock
            self._held = None

    # ---- reading

    def load(self) -> str:
        """Read the journal from disk; returns ok, missing, corrupt or memory (see the module doc)."""
        with self._lock:
            self._entries = {}
            self.status = self._load()
            self.metrics.journal_entries.set(len(self._entries))
            return self.status

    def _load(self) -> str:
        if self.path is None:
            log.warning(
                "no state directory: the ownership journal lives in memory and does not survive a restart"
            )
            return "memory"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("rb") as f:
                data = f.read(MAX_BYTES + 1)
        except FileNotFoundError:
            self._problem(
                "missing",
                f"no ownership journal at {self.path} (first start, or the state directory "
                "was lost): no instance is proven ours by the journal",
            )
            return "missing"
        except OSError as error:
            self._problem(
                "unreadable",
                f"cannot read the ownership journal {self.path}: {error.strerror}; "
                "no instance is proven ours by the journal",
            )
            return "corrupt"
        try:
            entries = decode(data)
        except ValueError as error:
            aside = self.path.with_name(JOURNAL_FILE + ".corrupt")
            try:
                os.replace(self.path, aside)
            except OSError:
                aside = self.path
            self._problem(
                "corrupt",
                f"the ownership journal {self.path} cannot be trusted ({error}); kept as "
                f"{aside}; no instance is proven ours by it, so none of its instances is destroyed "
                "on a busy GPU",
            )
            return "corrupt"
        self._entries = {e.key: e for e in entries}
        log.info("ownership journal %s: %d instance(s) recorded", self.path, len(self._entries))
        return "ok"

    def _problem(self, reason: str, message: str) -> None:
        self.metrics.journal_problems.labels(reason=reason).inc()
        (log.info if reason == "missing" else log.error)("%s", message)

    def entries(self) -> list[Entry]:
        with self._lock:
            return sorted(self._entries.values(), key=lambda e: e.key)

    def get(self, key: Key) -> Entry | None:
        with self._lock:
            return self._entries.get(key)

    # ---- writing (each call is one atomic write of the whole journal)

    def record(self, entry: Entry, durable: bool = True) -> None:
        """Add or replace the entry of its key; JournalError when it could not be written.

        `durable=False` skips the two fsyncs (still atomic by rename, so it survives a killed
        process): for the runtime identity recorded after a create. The intent written before
        the create is always durable; GPU instances do not survive an OS crash or a power loss,
        so an identity lost with one proves nothing that still exists, and the intent remains."""
        with self._lock:
            if entry.key not in self._entries and len(self._entries) >= MAX_ENTRIES:
                raise JournalError(f"ownership journal full ({MAX_ENTRIES} entries)")
            previous = self._entries.get(entry.key)
            self._entries[entry.key] = entry
            try:
                self._write(durable)
            except JournalError:
                self._restore(entry.key, previous)
                raise

    def remove(self, keys: Iterable[Key]) -> None:
        with self._lock:
            gone = {k: self._entries.pop(k) for k in list(keys) if k in self._entries}
            if not gone:
                return
            try:
                self._write()
            except JournalError:
                self._entries.update(gone)
                raise

    def _restore(self, key: Key, previous: Entry | None) -> None:
        if previous is None:
            self._entries.pop(key, None)
        else:
            self._entries[key] = previous

    def _write(self, durable: bool = True) -> None:
        self.metrics.journal_entries.set(len(self._entries))
        if self.path is None:
            return
        text = encode(self._entries.values()).encode()
        tmp = self.path.with_name(JOURNAL_FILE + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(text)
                while view:
                    view = view[os.write(fd, view) :]
                if durable:
                    os.fsync(fd)  # the new content is on disk before the rename makes it the journal
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            if durable:
                directory = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(directory)  # the rename itself is on disk
                finally:
                    os.close(directory)
        except OSError as error:
            self.metrics.journal_problems.labels(reason="write-failed").inc()
            raise JournalError(f"cannot write the ownership journal {self.path}: {error.strerror}") from None
        self.metrics.journal_writes.inc()
