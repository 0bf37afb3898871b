"""kubelet's side of the wire: plugin registration and the DRA service, over unix sockets.

- Registration (`pluginregistration.Registration`, kubelet's plugin watcher dials the socket this
  plugin puts in its plugins_registry dir): GetInfo answers type `DRAPlugin`, the driver name, the
  DRA socket and the services `v1.DRAPlugin`, `v1beta1.DRAPlugin` (kubelet takes the first it
  supports, in this order: kubelet's `pkg/kubelet/cm/dra/plugin/registration.go`).
- DRA (`k8s.io.kubelet.pkg.apis.dra.v1[beta1].DRAPlugin`): one implementation behind both
  versions (their messages are the same). Every claim of a request gets an answer: its devices, or
  its own error; a bad claim never fails the others and never the RPC.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from concurrent import futures
from pathlib import Path

import grpc
from google.protobuf.internal.containers import MessageMap

from plugin.api import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from plugin.api import pluginregistration_pb2 as regpb
from plugin.api import pluginregistration_pb2_grpc as regrpc
from plugin.dra.claims import ClaimError, check_ref
from plugin.dra.prepare import PrepareError, Preparer

log = logging.getLogger("dynmig.dra.service")
PLUGIN_TYPE = "DRAPlugin"
SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
MAX_CLAIMS = 256  # claims per call: kubelet sends a pod's claims; a pod has at most 128
MAX_ERROR = 1024


class _Registration(regrpc.RegistrationServicer):
    def __init__(self, driver: str, endpoint: str, on_status: Callable[[bool, str], None]):
        self.driver, self.endpoint, self.on_status = driver, endpoint, on_status

    def GetInfo(self, request: regpb.InfoRequest, context: grpc.ServicerContext) -> regpb.PluginInfo:
        return regpb.PluginInfo(
            type=PLUGIN_TYPE, name=self.driver, endpoint=self.endpoint, supported_versions=list(SERVICES)
        )

    def NotifyRegistrationStatus(
        self, request: regpb.RegistrationStatus, context: grpc.ServicerContext
    ) -> regpb.RegistrationStatusResponse:
        self.on_status(bool(request.plugin_registered), str(request.error)[:MAX_ERROR])
        return regpb.RegistrationStatusResponse()


_Claim = dra_v1_pb2.Claim | dra_v1beta1_pb2.Claim
_PrepareAnswers = (
    MessageMap[str, dra_v1_pb2.NodePrepareResourceResponse]
    | MessageMap[str, dra_v1beta1_pb2.NodePrepareResourceResponse]
)
_UnprepareAnswers = (
    MessageMap[str, dra_v1_pb2.NodeUnprepareResourceResponse]
    | MessageMap[str, dra_v1beta1_pb2.NodeUnprepareResourceResponse]
)


def _prepare(preparer: Preparer, claims: Iterable[_Claim], answers: _PrepareAnswers) -> None:
    """NodePrepareResources of either API version (their messages are the same)."""
    for claim in list(claims)[:MAX_CLAIMS]:
        answer = answers[claim.uid[:64] or "?"]
        try:
            for d in preparer.prepare(check_ref(claim.namespace, claim.uid, claim.name)):
                answer.devices.add(
                    request_names=[d.request],
                    pool_name=d.pool,
                    device_name=d.device,
                    cdi_device_ids=d.cdi_ids,
                )
        except Exception as error:  # noqa: BLE001 - each claim's failure is its own answer
            del answer.devices[:]
            answer.error = _message(claim.uid, error)
            log.warning("NodePrepareResources: %s", answer.error)


def _unprepare(preparer: Preparer, claims: Iterable[_Claim], answers: _UnprepareAnswers) -> None:
    """NodeUnprepareResources of either API version."""
    for claim in list(claims)[:MAX_CLAIMS]:
        answer = answers[claim.uid[:64] or "?"]
        try:
            preparer.unprepare(check_ref(claim.namespace, claim.uid, claim.name))
        except Exception as error:  # noqa: BLE001 - each claim's failure is its own answer
            answer.error = _message(claim.uid, error)
            log.warning("NodeUnprepareResources: %s", answer.error)


class _DraV1(dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer):
        self.preparer = preparer

    def NodePrepareResources(
        self, request: dra_v1_pb2.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodePrepareResourcesResponse:
        out = dra_v1_pb2.NodePrepareResourcesResponse()
        _prepare(self.preparer, request.claims, out.claims)
        return out

    def NodeUnprepareResources(
        self, request: dra_v1_pb2.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodeUnprepareResourcesResponse:
        out = dra_v1_pb2.NodeUnprepareResourcesResponse()
        _unprepare(self.preparer, request.claims, out.claims)
        return out


class _DraV1beta1(dra_v1beta1_pb2_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer):
        self.preparer = preparer

    def NodePrepareResources(
        self, request: dra_v1beta1_pb2.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1beta1_pb2.NodePrepareResourcesResponse:
        out = dra_v1beta1_pb2.NodePrepareResourcesResponse()
        _prepare(self.preparer, request.claims, out.claims)
        return out

    def NodeUnprepareResources(
        self, request: dra_v1beta1_pb2.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1beta1_pb2.NodeUnprepareResourcesResponse:
        out = dra_v1beta1_pb2.NodeUnprepareResourcesResponse()
        _unprepare(self.preparer, request.claims, out.claims)
        return out


def _message(uid: str, error: Exception) -> str:
    """A claim's error for kubelet. Refusals say why as they are; anything else (NVML or the journal
    failing mid-call, a bug) is named with the claim, so one claim never fails the whole RPC and
    kubelet retries it: prepare is idempotent, and unprepare destroys nothing NVML cannot vouch for."""
    if isinstance(error, (ClaimError, PrepareError)):
        return str(error)[:MAX_ERROR]
    if not isinstance(error, (OSError, RuntimeError)):  # not NVML, the journal or the API: a bug
        log.error("claim %s: unexpected failure", uid[:64], exc_info=error)
    return f"claim {uid[:64]}: {type(error).__name__}: {error}"[:MAX_ERROR]


class KubeletSockets:
    """The registration socket and the DRA socket, each its own gRPC server."""

    def __init__(self, registry_dir: Path, plugin_dir: Path, driver: str, preparer: Preparer):
        self.registration_path = registry_dir / f"{driver}-reg.sock"
        self.dra_path = plugin_dir / "dra.sock"
        self.driver = driver
        self.registered = threading.Event()
        self.last_status = ""
        # grpc's server.stop() leaves its thread pool running: stop() shuts the pools down itself
        self._pools = (
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="dra"),
            futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="dra-reg"),
        )
        self._dra = grpc.server(self._pools[0])
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(_DraV1(preparer), self._dra)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(_DraV1beta1(preparer), self._dra)
        self._reg = grpc.server(self._pools[1])
        regrpc.add_RegistrationServicer_to_server(
            _Registration(driver, str(self.dra_path), self._status), self._reg
        )

    def _status(self, registered: bool, error: str) -> None:
        self.last_status = "registered" if registered else f"refused: {error}"
        if registered:
            self.registered.set()
            log.info("kubelet registered DRA driver %s", self.driver)
        else:
            self.registered.clear()
            log.error("kubelet refused DRA driver %s: %s", self.driver, error)

    def start(self) -> None:
        """DRA socket first: kubelet dials it as soon as it sees the registration socket."""
        for server, path in ((self._dra, self.dra_path), (self._reg, self.registration_path)):
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists() or path.is_socket():
                os.unlink(path)  # a previous process's socket: nobody answers on it
            server.add_insecure_port(f"unix://{path}")
            server.start()

    def stop(self) -> None:
        for server, path in ((self._reg, self.registration_path), (self._dra, self.dra_path)):
            server.stop(grace=1).wait(2)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        for pool in self._pools:  # a call still running after the grace ends here first
            pool.shutdown(wait=True, cancel_futures=True)
