"""List, then watch, one kind of object: the loop every dynmig cache and watcher runs.

As client-go's reflector does: list (remember the list's resourceVersion), then watch from it with
`allowWatchBookmarks` so that even a quiet watch moves the resourceVersion forward; a watch that
ends (its timeoutSeconds, a dropped connection) resumes from the last resourceVersion seen, so no
event is missed and nothing is listed again; `410 Gone` (the server's history no longer reaches
that version, as an HTTP status or an ERROR event) lists again. Failures back off exponentially
with jitter, so replicas that lost the API server together do not return together.

Objects stay plain JSON dicts (`_preload_content=False`: no model deserialisation). A watch is read
as lines of at most `max_line` bytes; a longer line (an object larger than any the API server
stores) is not buffered: the watch is dropped and the kind listed again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kube.client import LIST_TIMEOUT
from kube.errors import Gone, KubeError, from_status, translated

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# kube-apiserver refuses requests over 3 MiB and etcd objects over 1.5 MiB: an event line is smaller
MAX_LINE = 8 * 1024 * 1024
CHUNK = 64 * 1024
QUIET_WATCH = 1.0  # seconds: a watch open this long without an event ended normally (its timeout)


class LineTooLong(KubeError):
    """A watch sent a line longer than the reflector reads."""


def lines(chunks: Iterable[bytes], limit: int = MAX_LINE) -> Iterator[bytes]:
    """The non-blank newline-separated lines of a byte stream; LineTooLong once a line passes `limit`."""
    pending = bytearray()
    for chunk in chunks:
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            if end - start > limit:
                raise LineTooLong(f"a watch line is longer than {limit} bytes")
            line = bytes(pending[start:end])
            start = end + 1
            if line.strip():
                yield line
        del pending[:start]
        if len(pending) > limit:
            raise LineTooLong(f"a watch line is longer than {limit} bytes")
    if pending.strip():
        yield bytes(pending)


def list_objects(what: str, call: Callable[..., Any], **kwargs: Any) -> tuple[list[Obj], str]:
    """One complete list through an official-client list call: (items, resourceVersion).

    Raises KubeError on any failure, a partial (continued) list or an answer without items."""
    kwargs.setdefault("_request_timeout", LIST_TIMEOUT)
    with translated(what):
        doc = json.loads(call(_preload_content=False, **kwargs).data)
    if not isinstance(doc, dict):
        raise KubeError(f"{what}: the answer is not an object list")
    found = doc.get("metadata")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    if meta.get("continue"):
        raise KubeError(f"{what}: partial list (continue token)")
    items = doc.get("items")
    # a list that is not whole must not pass for one: the device plugin reclaims what no listed pod backs
    if not isinstance(items, list):
        raise KubeError(f"{what}: answer has no items")
    if not all(isinstance(item, dict) for item in items):
        raise KubeError(f"{what}: an item is not an object")
    for item in items:
        strip_managed_fields(item)
    return items, str(meta.get("resourceVersion") or "")


def strip_managed_fields(obj: Obj) -> Obj:
    """`obj` without `metadata.managedFields` (server-side apply's ownership records), in place.

    Nothing here reads them, and on a cluster they are often as large as the rest of the metadata:
    kept, they would be held in every cache and walked by every comparison of an object's versions.
    client-go informers drop them the same way (a transform), before the object is stored."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class Reflector:
    """List then watch one kind; `on_replace(items)` after each list, `on_event(type, obj)` per change.

    call: an official-client list function with its fixed arguments bound (e.g.
    `functools.partial(core.list_namespaced_secret, ns, field_selector=...)`); the reflector adds
    the list and watch arguments. `run()` loops in the caller's thread until `stop` is set;
    `start()` runs it in a daemon thread. `interrupt()` closes the open watch from another thread.
    """

    def __init__(
        self,
        name: str,
        call: Callable[..., Any],
        on_replace: Callable[[list[Obj]], None],
        on_event: Callable[[str, Obj], None],
        stop: threading.Event | None = None,
        watch_timeout: int = 240,
        on_synced: Callable[[], None] = lambda: None,
        backoff: tuple[float, float] = (0.2, 5.0),
        max_line: int = MAX_LINE,
    ) -> None:
        self.name = name
        self._call = call
        self._on_replace = on_replace
        self._on_event = on_event
        self._stop = stop if stop is not None else threading.Event()
        self._timeout = watch_timeout
        self._on_synced = on_synced
        self._backoff = backoff
        self._max_line = max_line
        self._response: Any = None
        self.synced = threading.Event()
        self.resource_version = ""
        self.relists = 0  # lists done (the first one included)
        self.watches = 0  # watch requests answered
        self._thread = threading.Thread(target=self.run, name=f"dynmig-watch-{name}", daemon=True)

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Reflector:
        self._thread.start()
        return self

    def interrupt(self) -> None:
        """Close the open watch now (a thread blocked reading it wakes up); harmless when none is open."""
        response = self._response
        if response is None:
            return
        # closing the file object does not wake a thread blocked in recv(); shutting the socket does
        sock = getattr(getattr(response, "connection", None), "sock", None)
        with contextlib.suppress(OSError):
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):  # closing from another thread may race the reader
            response.close()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.join(timeout)

    def join(self, timeout: float = 5.0) -> None:
        """Wait for the thread, closing the open watch (again, if a new one was opening) until it ends."""
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:
            self.interrupt()
            self._thread.join(0.05)

    # ---- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        delay = self._backoff[0]
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                if self._watch():
                    delay = self._backoff[0]
                    continue
                failure = "the watch ended at once without an event"
            except Gone:
                log.info(
                    "watch of %s expired at resourceVersion %s; listing again",
                    self.name,
                    self.resource_version,
                )
                need_list = True
                continue
            except LineTooLong as error:
                failure, need_list = str(error), True
            except Exception as error:  # noqa: BLE001 - a watch must survive any failure and resume
                failure = str(error)
            if self._stop.is_set():
                return
            pause = delay * (1 + random.random())  # jitter: replicas cut off together come back apart
            log.warning("watch of %s: %s; retrying in %.1fs", self.name, failure, pause)
            self._stop.wait(pause)
            delay = min(delay * 2, self._backoff[1])

    def _list(self) -> None:
        items, self.resource_version = list_objects(f"list {self.name}", self._call)
        self._on_replace(items)
        self.relists += 1
        self.synced.set()
        self._on_synced()

    def _watch(self) -> bool:
        """One watch from the current resourceVersion; True when it carried an event or stayed open
        a while (a quiet watch reaching its timeout is normal; one the server ends at once is not,
        and backs off)."""
        opened = time.monotonic()
        with translated(f"watch {self.name}"):
            response = self._call(
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._timeout,
                _preload_content=False,
                _request_timeout=(10, self._timeout + 30),
            )
        self.watches += 1
        self._response = response
        if self._stop.is_set():
            self.interrupt()
        seen = whole = False
        try:
            for line in self._read(response):
                if self._stop.is_set():
                    return True
                self._apply(json.loads(line))
                seen = True
            whole = True
        finally:
            self._response = None
            with contextlib.suppress(Exception):
                if not whole:  # a stream left half read must not go back to the pool for the next request
                    response.close()
                response.release_conn()
        return seen or time.monotonic() - opened >= QUIET_WATCH

    def _read(self, response: Any) -> Iterator[bytes]:
        """The watch's lines; a failure reading them (not one of our callbacks) becomes a KubeError."""
        with translated(f"watch {self.name}"):
            yield from lines(response.stream(CHUNK, decode_content=True), self._max_line)

    def _apply(self, event: Any) -> None:
        if not isinstance(event, dict):
            raise KubeError(f"watch {self.name}: an event that is not an object")
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            obj = {}
        if kind == "ERROR":
            raise from_status(
                f"watch {self.name}",
                obj.get("code"),
                str(obj.get("reason") or ""),
                str(obj.get("message") or ""),
            )
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.resource_version = str(rv)
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._on_event(kind, strip_managed_fields(obj))
