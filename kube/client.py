"""Building an API client: the pod's service account in a cluster, a kubeconfig elsewhere.

The official client sets no request timeout of its own: every call passes one (`REQUEST_TIMEOUT`,
or a caller's own), so an API server that stops answering cannot hang a scheduling decision or an
Allocate.
"""

from __future__ import annotations

import os

from kubernetes import client, config

# (connect, read) seconds for a single request; watches pass their own (they read for minutes)
REQUEST_TIMEOUT: tuple[float, float] = (3.0, 10.0)
LIST_TIMEOUT: tuple[float, float] = (10.0, 60.0)


def api_client(
    kubeconfig: str | None = None,
    *,
    in_cluster: bool | None = None,
    context: str | None = None,
    retries: int | None = None,
) -> client.ApiClient:
    """An ApiClient.

    in_cluster: True reads the pod's service account (and `KUBERNETES_SERVICE_HOST`); False reads
    `kubeconfig` (the client's default path when None); None means in-cluster when no kubeconfig is
    given and the pod environment says so. retries: urllib3 retries on connection errors (None keeps
    the client's default; 0 fails at once, for callers that retry on their own schedule).
    """
    if in_cluster is None:
        in_cluster = not kubeconfig and "KUBERNETES_SERVICE_HOST" in os.environ
    configuration = client.Configuration()
    if in_cluster:
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(
            config_file=kubeconfig or None, context=context, client_configuration=configuration
        )
    if retries is not None:
        configuration.retries = retries
    return client.ApiClient(configuration)
