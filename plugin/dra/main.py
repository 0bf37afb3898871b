"""`dynmig dra-plugin`: the process. Start order matters for safety:

1. NVML and the node's MIG GPUs (`gpus.discover`); the ownership journal (`plugin.journal`).
2. Adoption (`Preparer.adopt`): instances of claims that still exist stay, those of claims the API
   says are gone are released (journal-proven, busy-checked); an unreachable API decides nothing.
3. The pool is published (`publish.SlicePublisher`) before kubelet is told the driver exists, so a
   claim is never allocated against a pool that forgets a running instance.
4. The DRA socket, then the registration socket (`service.KubeletSockets`); READY_TEXT is logged.
5. A sync loop republishes after every prepare/unprepare, every change of a claim allocated here
   (watched), and every `--resync-interval`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s

from base import logs
from base.version import version
from kube import client as kube_client
from kube.errors import KubeError, NotFound, translated
from kube.mirror import Mirror
from kube.reflector import Reflector
from kube.shutdown import on_stop_signal, run_until_signalled
from mig.dra.devices import Gpu
from mig.types import Placement
from plugin.cdi import MigEdits
from plugin.dra.cdi import CdiSpecs
from plugin.dra.claims import ClaimError, ClaimRef
from plugin.dra.config import ConfigError, DraConfig, load_config
from plugin.dra.events import ClaimEvents
from plugin.dra.gpus import discover, inventory, publishable, unheld_slices
from plugin.dra.prepare import Preparer
from plugin.dra.publish import SlicePublisher, pending_instances
from plugin.dra.service import KubeletSockets
from plugin.dra.status import DeviceReport, DeviceStatusWriter
from plugin.instances import InstanceManager, ManagedInstance
from plugin.journal import Journal
from plugin.metrics import PluginMetrics
from plugin.nvml import Nvml, NvmlError

log = logging.getLogger("dynmig.dra")
READY_TEXT = "dra-plugin: serving"
TIMEOUT = (5.0, 15.0)


class DraPluginApp:
    def __init__(self, config: DraConfig, api: k8s.ApiClient, nvml: Nvml | None = None):
        self.config = config
        self.nvml = nvml or Nvml()
        self.metrics = PluginMetrics()
        self.resource = k8s.ResourceV1Api(api)
        self.journal = Journal(config.state_dir, self.metrics)
        self.publisher = SlicePublisher(api, config.node_name, config.driver)
        self.device_status = DeviceStatusWriter(api, config.driver)
        self.events = ClaimEvents.for_node(k8s.CoreV1Api(api), config.node_name)
        self.claims = Mirror()  # ResourceClaims, watched: the allocations on this node are occupied
        self._claims_lock = threading.Lock()
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_sync = 0.0
        self.sockets: KubeletSockets | None = None
        self.preparer: Preparer | None = None
        self._metrics_server: Any = None

    # ---- the API

    def read_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            with translated("read resourceclaim"):
                response = self.resource.read_namespaced_resource_claim(
                    name, namespace, _preload_content=False, _request_timeout=TIMEOUT
                )
                body = json.loads(response.data)
        except NotFound:
            return None
        except KubeError as error:
            raise ClaimError(f"claim {namespace}/{name} cannot be read: {error}") from None
        if not isinstance(body, dict):
            raise ClaimError(f"claim {namespace}/{name}: the API's answer is not an object")
        return body

    def _report_devices(self, ref: ClaimRef, reports: list[DeviceReport]) -> None:
        try:
            claim = self.read_claim(ref.namespace, ref.name)
        except ClaimError as error:
            log.warning("claim %s: not reported: %s", ref, error)
            return
        if claim is not None:
            self.events.created(ref, claim, reports)
        self.device_status.report(ref.namespace, ref.name, reports)

    def _released(self, ref: ClaimRef, instance: ManagedInstance) -> None:
        key = instance.key
        self.events.reclaimed(ref, f"{key.profile}@{key.start} on {key.gpu_uuid}", instance.mig_uuid or "?")

    def _claims_replaced(self, items: list[dict[str, Any]]) -> None:
        with self._claims_lock:
            self.claims.replace(items)
        self._dirty.set()

    def _claim_event(self, kind: str, claim: dict[str, Any]) -> None:
        with self._claims_lock:
            self.claims.event(kind, claim)
        self._dirty.set()

    # ---- lifecycle

    def start(self) -> DraPluginApp:
        self.events.start()
        self.nvml.init()
        gpus = discover(self.nvml, self.config.device_config.allowlist, self.config.excluded)
        log.info("%d MIG GPUs published on %s", len(gpus), self.config.node_name)
        self.journal.load()
        edits = MigEdits(self.config.driver_root, self.config.mig_minors)
        cdi = CdiSpecs(self.config.cdi_dir, self.config.driver, edits)
        # the node's one writer of MIG instances, as in the device plugin: per-GPU locks, the journal
        manager = InstanceManager(
            self.nvml, inventory(gpus), self.metrics, self.journal, self.config.gpu_lock_dir
        )
        self.preparer = Preparer(
            manager,
            gpus,
            cdi,
            self.config.driver,
            self.config.node_name,
            self.read_claim,
            self._dirty.set,
            self._report_devices,
            self._released,
        )
        kept, released = self.preparer.adopt()
        log.info("adopted %d prepared instances, released %d of claims that are gone", kept, released)
        reflector = Reflector(
            "resourceclaims",
            self.resource.list_resource_claim_for_all_namespaces,
            self._claims_replaced,
            self._claim_event,
            self._stop,
        )
        reflector.start()
        if not reflector.synced.wait(30):  # the claims allocated here are published as occupied
            log.warning("the ResourceClaims could not be listed yet; publishing from NVML alone")
        self.sync()
        served = self.metrics.serve(self.config.metrics_address, healthz=self.alive, readyz=self.ready)
        self._metrics_server = served[0] if served else None
        self.sockets = KubeletSockets(
            self.config.registry_dir, self.config.plugin_dir, self.config.driver, self.preparer
        )
        self.sockets.start()
        self._threads = [threading.Thread(target=self._loop, name="dra-sync", daemon=True)]
        for t in self._threads:
            t.start()
        log.info(
            "%s: driver %s on %s (registration socket %s)",
            READY_TEXT,
            self.config.driver,
            self.config.node_name,
            self.sockets.registration_path,
        )
        return self

    def sync(self) -> bool:
        """Publish the pool for what NVML shows and the claims allocated here say now."""
        assert self.preparer is not None
        gpus = list(self.preparer.gpus.values())
        with self._claims_lock:
            claims = self.claims.items()
        try:
            identities = [Gpu(g.minor, g.uuid, g.model, g.allowed) for g in gpus]
            pending = pending_instances(claims, identities, self.config.driver, self.config.node_name)
            held: dict[str, list[Placement]] = {u: [i.placement for i in p] for u, p in pending.items()}
            for entry in self.journal.entries():  # ours, created or about to be: their claims hold them
                held.setdefault(entry.gpuUUID, []).append(Placement(entry.start, entry.size))
            blocked = unheld_slices(self.nvml, gpus, held)
            ok = self.publisher.sync(publishable(self.nvml, gpus, pending), blocked)
        except NvmlError as error:
            log.warning("reading the GPUs for the pool failed (retried): %s", error)
            ok = False
        except Exception:  # the loop must outlive any one pass (a pool it cannot build)
            log.exception("building the pool failed (retried at the next sync)")
            ok = False
        self._last_sync = time.monotonic()
        return ok

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait(self.config.resync_interval)
            if self._stop.is_set():
                return
            self._dirty.clear()
            try:
                self._settle()
            except Exception:  # e.g. the journal not writable: logged, retried, the loop goes on
                log.exception("adoption retry failed (retried at the next sync)")
            self.sync()

    def _settle(self) -> None:
        """Adoption again for the journaled claims it could not settle at start (the API did not
        answer, or a gone claim's instance was busy), until each is kept or released."""
        if self.preparer is not None and self.preparer.undecided:
            try:
                kept, released = self.preparer.adopt(self.preparer.undecided)
            except (ClaimError, NvmlError, KubeError) as error:
                log.warning("adoption retry failed (retried): %s", error)
                return
            if released:
                log.info("released %d instances of claims that are gone (%d still undecided)", released, kept)

    def alive(self) -> tuple[bool, str]:
        late = time.monotonic() - self._last_sync > 3 * self.config.resync_interval + 30
        return (not late, "sync loop stalled" if late else "ok")

    def ready(self) -> tuple[bool, str]:
        if self.sockets is None or not self.sockets.registered.is_set():
            return False, "not registered with kubelet"
        return True, f"ok: driver {self.config.driver} registered with kubelet"

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()
        if self.sockets is not None:
            self.sockets.stop()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        with contextlib.suppress(NvmlError):
            self.nvml.shutdown()
        self.events.stop()


def main(argv: list[str] | None = None) -> int:
    try:
        config = load_config(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as error:
        print(f"dynmig dra-plugin: configuration error: {error}", file=sys.stderr)
        return 2
    logs.setup(config.log_level, config.log_format, node=config.node_name)
    log.info("dynmig %s dra-plugin starting", version())
    try:
        api = kube_client.api_client(config.kubeconfig or None, in_cluster=not config.kubeconfig, retries=0)
    except Exception as error:  # noqa: BLE001 - a bad kubeconfig is a configuration error
        print(
            f"dynmig dra-plugin: configuration error: kubeconfig {config.kubeconfig or '(in-cluster)'}: {error}",
            file=sys.stderr,
        )
        return 2
    received = on_stop_signal()  # before start: a stop during startup is graceful too
    app = DraPluginApp(config, api)
    try:
        app.start()
    except NvmlError as error:
        print(f"dynmig dra-plugin: NVML: {error}", file=sys.stderr)
        return 1
    run_until_signalled(received, app.stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
