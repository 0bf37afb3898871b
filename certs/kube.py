"""Building a Kubernetes API client: in-cluster when running in a pod, else a kubeconfig."""

from __future__ import annotations

import os


def api_client(kubeconfig: str | None = None, in_cluster: bool | None = None, context: str | None = None):
    """An ApiClient. `in_cluster=None` means: in-cluster if the pod environment says so."""
    from kubernetes import client, config

    if in_cluster is None:
        in_cluster = kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ
    if in_cluster:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    return config.new_client_from_config(config_file=kubeconfig, context=context)
