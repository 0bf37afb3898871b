"""Simulated Kubernetes API server (see server.ApiServer) for tests and `dynmig lab`.

Where it behaves as kube-apiserver does, so the official client and kubectl 1.35 with its default
settings can tell no difference:
- watches (registry.watch): resourceVersion "", "0", a version, a compacted one (ERROR 410
  Expired); the WatchList protocol (sendInitialEvents + the k8s.io/initial-events-end bookmark);
  allowWatchBookmarks; Tables for `kubectl get -w` (printers.py columns);
- media (media.py, protobuf.py): JSON, protobuf bodies for the kinds kubectl's typed clients send
  (protobuf_schema.json), 415/406 for what it cannot decode or produce;
- OpenAPI v3 (openapi.py, schemas.py) and server-side field validation (fieldValidation);
- canonical resource quantities on write (quantity.py, objects.canonicalize_quantities);
- graceful deletion of pods, finalizers, namespace Terminating and the namespace controller
  (registry.delete, registry.sync_namespaces), pods on nodes without a kubelet going once their
  grace period ends (reap_after_grace);
- pods/log from files a simulated kubelet appends to (logs.py, ApiServer.log_path);
- Events through core/v1 and events.k8s.io/v1 over one storage, converted field by field, with
  the real create/update validation and each API's field selector labels (events.py,
  conversion.py).
"""

from sim.apiserver.errors import ApiError
from sim.apiserver.identities import Identity, default_identities, service_account, write_kubeconfig
from sim.apiserver.server import ApiServer

__all__ = ["ApiError", "ApiServer", "Identity", "default_identities", "service_account", "write_kubeconfig"]
