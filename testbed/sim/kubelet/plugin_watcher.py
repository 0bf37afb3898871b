"""kubelet's plugin manager over a `plugins_registry` directory: a plugin announces itself by
creating a registration socket there; kubelet dials it, asks GetInfo, hands the answer to the
handler for its type, and tells the plugin the outcome with NotifyRegistrationStatus.

Checked against kubernetes/kubernetes `pkg/kubelet/pluginmanager`:
- `pluginwatcher/plugin_watcher.go`: files whose name starts with "." and files that are not unix
  sockets are ignored; a socket that appears is added to the desired state, one that disappears
  removed (kubelet is told by fsnotify; here the directory is polled);
- `reconciler/reconciler.go`: a plugin whose socket was removed, or re-created (another
  timestamp), is deregistered; a desired plugin not yet registered is registered, again and again
  while that fails (`nestedpendingoperations` backs off exponentially, 0.5 s doubling to 2 min);
- `operationexecutor/operation_generator.go` `GenerateRegisterPluginFunc`: dial (blocking), GetInfo
  with a 1 s timeout; no handler for the type → NotifyRegistrationStatus(false, "RegisterPlugin
  error -- no handler registered for plugin type: <type> at socket <path>"); an empty endpoint
  means the registration socket itself; ValidatePlugin fails → notify false "RegisterPlugin error --
  plugin validation failed with err: ..."; RegisterPlugin fails → notify false "RegisterPlugin
  error -- plugin registration failed with err: ..."; else notify true. Unregistering calls the
  handler's DeRegisterPlugin.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from plugin.api import pluginregistration_pb2 as regpb
from plugin.api import pluginregistration_pb2_grpc as regrpc

log = logging.getLogger("sim.kubelet.plugins")
DIAL_TIMEOUT_S = 10.0  # operation_generator's dialTimeoutDuration
GET_INFO_TIMEOUT_S = 1.0
NOTIFY_TIMEOUT_S = 5.0
BACKOFF = (0.5, 122.0)  # nestedpendingoperations: initialDurationBeforeRetry, maxDurationBeforeRetry


class PluginHandler(Protocol):
    """What kubelet's plugin manager asks of a plugin type's handler (cache.PluginHandler)."""

    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> str | None: ...

    def register_plugin(self, name: str, endpoint: str, versions: list[str]) -> str | None: ...

    def deregister_plugin(self, name: str, endpoint: str) -> None: ...


@dataclass(frozen=True)
class Registration:
    """One registration attempt as the plugin was told of it (error None: registered)."""

    socket: str
    type: str
    name: str
    endpoint: str
    versions: tuple[str, ...]
    error: str | None


@dataclass
class _Known:
    stamp: tuple[int, int]  # (inode, ctime): the socket's identity, as kubelet's timestamp
    name: str = ""
    endpoint: str = ""
    handler: PluginHandler | None = None
    registered: bool = False
    attempts: int = 0
    next_try: float = 0.0


class PluginWatcher:
    def __init__(
        self,
        registry_dir: str | Path,
        handlers: dict[str, PluginHandler],
        *,
        interval: float = 0.05,
        dial_timeout: float = DIAL_TIMEOUT_S,
        backoff: tuple[float, float] = BACKOFF,
    ) -> None:
        self.registry_dir = Path(registry_dir)
        self.handlers = handlers
        self.interval, self.dial_timeout, self.backoff = interval, dial_timeout, backoff
        self.log: list[Registration] = []
        self._known: dict[Path, _Known] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> PluginWatcher:
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kubelet-plugin-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def registered(self) -> list[tuple[str, str]]:
        """(plugin name, endpoint) of every plugin registered now."""
        with self._cond:
            return [(k.name, k.endpoint) for k in self._known.values() if k.registered]

    def wait_for(self, predicate, timeout: float = 30.0, what: str = "") -> None:
        """Block until predicate(watcher) holds; TimeoutError names what was awaited and the log."""
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self), timeout=timeout):
                raise TimeoutError(
                    f"plugin watcher: timed out waiting for {what or predicate}; log: {self.log}"
                )

    # ---- the reconciler -------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.reconcile()
            except Exception as error:  # noqa: BLE001 - a broken plugin never stops the watcher
                log.debug("plugin watcher: %s", error)

    def reconcile(self) -> None:
        desired = self._sockets()
        for path, known in list(self._known.items()):
            if desired.get(path) != known.stamp:
                self._unregister(path, known)
        now = time.monotonic()
        for path, stamp in desired.items():
            with self._cond:
                known = self._known.setdefault(path, _Known(stamp))
            if not known.registered and now >= known.next_try:
                self._register(path, known)

    def _sockets(self) -> dict[Path, tuple[int, int]]:
        out = {}
        try:
            entries = list(self.registry_dir.iterdir())
        except OSError:
            return {}
        for path in entries:
            if path.name.startswith("."):
                continue
            try:
                st = path.lstat()
            except OSError:
                continue
            if path.is_socket():
                out[path] = (st.st_ino, st.st_ctime_ns)
        return out

    def _unregister(self, path: Path, known: _Known) -> None:
        with self._cond:
            self._known.pop(path, None)
            self._cond.notify_all()
        if known.registered and known.handler is not None:
            known.handler.deregister_plugin(known.name, known.endpoint)

    def _register(self, path: Path, known: _Known) -> None:
        known.attempts += 1
        delay = min(self.backoff[1], self.backoff[0] * 2 ** min(known.attempts - 1, 30))
        known.next_try = time.monotonic() + delay
        channel = grpc.insecure_channel(f"unix://{path}", options=[("grpc.default_authority", "localhost")])
        try:
            grpc.channel_ready_future(channel).result(timeout=self.dial_timeout)
            stub = regrpc.RegistrationStub(channel)
            info = stub.GetInfo(regpb.InfoRequest(), timeout=GET_INFO_TIMEOUT_S)
            self._admit(path, known, stub, info)
        except (grpc.RpcError, grpc.FutureTimeoutError) as error:
            log.debug("plugin watcher: RegisterPlugin error at socket %s: %s", path, error)
        finally:
            channel.close()

    def _admit(
        self, path: Path, known: _Known, stub: regrpc.RegistrationStub, info: regpb.PluginInfo
    ) -> None:
        versions = list(info.supported_versions)
        endpoint = info.endpoint or str(path)
        handler = self.handlers.get(info.type)
        error: str | None
        if handler is None:
            error = (
                f"RegisterPlugin error -- no handler registered for plugin type: {info.type} at socket {path}"
            )
        elif (problem := handler.validate_plugin(info.name, endpoint, versions)) is not None:
            error = f"RegisterPlugin error -- plugin validation failed with err: {problem}"
        elif (problem := handler.register_plugin(info.name, endpoint, versions)) is not None:
            error = f"RegisterPlugin error -- plugin registration failed with err: {problem}"
        else:
            error = None
        with self._cond:
            known.name, known.endpoint, known.handler = info.name, endpoint, handler
            known.registered = error is None
            self.log.append(Registration(str(path), info.type, info.name, endpoint, tuple(versions), error))
            self._cond.notify_all()
        stub.NotifyRegistrationStatus(
            regpb.RegistrationStatus(plugin_registered=error is None, error=error or ""),
            timeout=NOTIFY_TIMEOUT_S,
        )
