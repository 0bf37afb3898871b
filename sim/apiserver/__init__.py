"""Simulated Kubernetes API server (see server.ApiServer) for tests and `dynmig lab`."""

from sim.apiserver.errors import ApiError
from sim.apiserver.identities import Identity, default_identities, service_account, write_kubeconfig
from sim.apiserver.server import ApiServer

__all__ = ["ApiError", "ApiServer", "Identity", "default_identities", "service_account", "write_kubeconfig"]
