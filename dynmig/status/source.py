"""Read-only access to a cluster for `dynmig status`: list nodes and pods with the official client,
from any kubeconfig (`--kubeconfig`, `KUBECONFIG`, `~/.kube/config`; `--context`) or in a pod.

Errors become one `StatusError` line that says what to do: a 403 names the missing permission (and
the ClusterRole rule that grants it), a 401 the credentials, an unreachable server its address.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from kube.errors import KubeError, Unavailable, translated

PAGE = 500  # objects per list call (the API server pages; we follow `continue`)
MAX_PAGES = 2000  # 1,000,000 objects: a bound, not a real cluster
TIMEOUT = (5.0, 30.0)  # connect, read (seconds)
READ_ONLY_RULE = (
    "a ClusterRole with rules [{apiGroups: [''], resources: [nodes, pods], verbs: [get, list, watch]}]"
)
# optional: with list on policy/poddisruptionbudgets, defrag advice respects the budgets


class StatusError(RuntimeError):
    """A problem reaching or reading the cluster, worded for the person at the terminal."""


def api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """A client for the kubeconfig's (or the given) context; in a pod without one, in-cluster config."""
    try:
        return config.new_client_from_config(config_file=kubeconfig or None, context=context or None)
    except ConfigException as error:
        if kubeconfig or context:
            raise StatusError(f"kubeconfig: {error}") from None
        try:
            config.load_incluster_config()
        except ConfigException:
            raise StatusError(
                f"no kubeconfig found ({error}); pass --kubeconfig FILE or set KUBECONFIG"
            ) from None
        return client.ApiClient()
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise StatusError(f"kubeconfig {kubeconfig or '(default)'} cannot be read: {error}") from None


def _forbidden(resource: str, scope: str) -> StatusError:
    return StatusError(
        f"forbidden: you may not list {resource} {scope}. dynmig status needs get/list on nodes and pods "
        f"(read-only), e.g. {READ_ONLY_RULE}"
    )


def _http_error(error: KubeError, resource: str, scope: str, host: str) -> StatusError:
    if error.status == 403:
        return _forbidden(resource, scope)
    if error.status == 401:
        return StatusError("unauthorized: the API server did not accept the kubeconfig's credentials")
    if error.status is None and isinstance(error, Unavailable):
        return StatusError(f"cannot reach the API server at {host}: {error}")
    if error.status is None:
        return StatusError(f"the API server's answer to list {resource} is not JSON: {error}")
    reason = (error.reason or "").strip()
    return StatusError(f"listing {resource} {scope} failed: HTTP {error.status} {reason}".rstrip())


@dataclass(frozen=True)
class Cluster:
    """Nodes and pods as plain JSON objects, read in one pass."""

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    pdbs: list[dict[str, Any]] | None = None  # PodDisruptionBudgets; None when they cannot be read
    # resource.k8s.io/v1 ResourceSlices and ResourceClaims (DRA nodes); None when the API has no such
    # kinds or they may not be listed (then only extender nodes are drawn)
    slices: list[dict[str, Any]] | None = None
    claims: list[dict[str, Any]] | None = None


class Source:
    """Lists the objects `dynmig status` reads; every call is a plain read (list), nothing is written."""

    def __init__(self, api: client.ApiClient):
        self.core = client.CoreV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.resource = client.ResourceV1Api(api)
        self.host = api.configuration.host

    def read(self) -> Cluster:
        nodes = list(self._list("nodes", "in the cluster", self.core.list_node))
        pods = list(self._list("pods", "in all namespaces", self.core.list_pod_for_all_namespaces))
        slices = self._optional("resourceslices", "in the cluster", self.resource.list_resource_slice)
        claims = None
        if slices:
            call = self.resource.list_resource_claim_for_all_namespaces
            claims = self._optional("resourceclaims", "in all namespaces", call)
        return Cluster(nodes, pods, self._budgets(), slices, claims)

    def device_configs(self, selector: str) -> list[dict[str, Any]] | None:
        """The ConfigMaps `selector` picks (the device configs, for the resource names); optional like the
        budgets: None when they may not be listed."""
        call = functools.partial(self.core.list_config_map_for_all_namespaces, label_selector=selector)
        try:
            return list(self._list("configmaps", "in all namespaces", call))
        except StatusError:
            return None

    def _budgets(self) -> list[dict[str, Any]] | None:
        """PodDisruptionBudgets for defrag advice: optional (a read-only role may not grant them)."""
        call = self.policy.list_pod_disruption_budget_for_all_namespaces
        return self._optional("poddisruptionbudgets", "in all namespaces", call)

    def _optional(self, resource: str, scope: str, call: Any) -> list[dict[str, Any]] | None:
        """A list `dynmig status` can do without: None when it may not be read or the API lacks it."""
        try:
            return list(self._list(resource, scope, call))
        except StatusError:
            return None

    def _list(self, resource: str, scope: str, call: Any) -> Iterator[dict[str, Any]]:
        token = None
        for _ in range(MAX_PAGES):
            body = self._page(resource, scope, call, token)
            for item in body.get("items") or ():
                if isinstance(item, dict):
                    yield item
            meta = body.get("metadata")
            token = meta.get("continue") if isinstance(meta, dict) else None
            if not token:
                return
        raise StatusError(f"listing {resource}: more than {MAX_PAGES * PAGE} objects; stopped")

    def _page(self, resource: str, scope: str, call: Any, token: str | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"limit": PAGE, "_preload_content": False, "_request_timeout": TIMEOUT}
        if token:
            kwargs["_continue"] = token
        try:
            with translated(f"list {resource}"):
                body = json.loads(call(**kwargs).data)
        except KubeError as error:
            raise _http_error(error, resource, scope, self.host) from None
        if not isinstance(body, dict):
            raise StatusError(f"the API server's answer to list {resource} is not a list object")
        return body
