"""Calls to a scheduler extender exactly as kube-scheduler makes them (k8s.io/kube-scheduler
extender/v1): POST <urlPrefix>/<verb>, PascalCase JSON (Go structs without json tags), HTTP 200
required, httpTimeout as the client timeout, TLS per tlsConfig.

Prioritize as kubernetes `pkg/scheduler/extender.go` `Prioritize` and `schedule_one.go`
`prioritizeNodes` do it: the feasible nodes are sent as filter sends them; the reply is a
HostPriorityList (`[{"Host", "Score"}]`), each score × the entry's weight × MaxNodeScore (100) /
MaxExtenderPriority (10) added to the host's total; an entry without prioritizeVerb adds nothing,
and a failed prioritize is skipped whatever `ignorable` says ("Prioritization errors from extender
can be ignored")."""

from __future__ import annotations

import json
import ssl
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3

from sim.scheduler.config import ExtenderConfig


class ExtenderError(Exception):
    """The call failed or the extender answered with `Error`; `ignorable` decides what happens."""


@dataclass
class FilterResult:
    node_names: list[str]
    failed: dict[str, str]
    failed_unresolvable: dict[str, str]


def _ssl_context(cfg: ExtenderConfig) -> ssl.SSLContext:
    tls = cfg.tls
    # kube-scheduler: with enableHTTPS and no CA configured, the connection is not verified.
    insecure = tls.insecure or (cfg.enable_https and not tls.has_ca)
    ctx = ssl.create_default_context()
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif tls.has_ca:
        ctx = ssl.create_default_context(
            cadata=tls.ca_data.decode() if tls.ca_data else None, cafile=tls.ca_file or None
        )
    if tls.cert_data or tls.cert_file:
        with tempfile.TemporaryDirectory() as d:
            cert, key = tls.cert_file, tls.key_file
            if tls.cert_data:
                cert = str(Path(d, "c.pem"))
                Path(cert).write_bytes(tls.cert_data)
            if tls.key_data:
                key = str(Path(d, "k.pem"))
                Path(key).write_bytes(tls.key_data)
            ctx.load_cert_chain(cert, key or None)
    return ctx


def _pod_requests(pod: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    spec = pod.get("spec") or {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        names.update((res.get("requests") or {}).keys())
        names.update((res.get("limits") or {}).keys())
    return names


def _lower_keys(doc: Any) -> dict[str, Any]:
    # Go's encoding/json matches keys case-insensitively when decoding the reply.
    return {k.lower(): v for k, v in doc.items()} if isinstance(doc, dict) else {}


MAX_NODE_SCORE = 100  # framework.MaxNodeScore
MAX_EXTENDER_PRIORITY = 10  # extenderv1.MaxExtenderPriority


def _host_scores(reply: Any, url: str) -> list[tuple[str, int]]:
    """A HostPriorityList as Go's decoder reads it (keys case-insensitive), or ExtenderError."""
    if reply is None:
        return []
    if not isinstance(reply, list):
        raise ExtenderError(f"extender at URL {url} answered prioritize with a non-list")
    out = []
    for item in reply:
        entry = _lower_keys(item)
        host, score = entry.get("host", ""), entry.get("score", 0)
        if not isinstance(host, str) or not isinstance(score, int) or isinstance(score, bool):
            raise ExtenderError(f"extender at URL {url} answered prioritize with a bad HostPriority")
        out.append((host, score))
    return out


class Extender:
    def __init__(self, cfg: ExtenderConfig):
        self.cfg = cfg
        self.url = cfg.url_prefix.rstrip("/")
        kwargs: dict[str, Any] = {
            "maxsize": 8,
            "retries": False,
            "timeout": urllib3.Timeout(total=cfg.http_timeout),
        }
        if self.url.startswith("https://"):
            kwargs["ssl_context"] = _ssl_context(cfg)
            if cfg.tls.server_name:
                kwargs["server_hostname"] = cfg.tls.server_name
        self._http = urllib3.PoolManager(**kwargs)
        self.filter_calls = 0
        self.filter_seconds = 0.0  # wall time of the filter calls, encoding the args to decoding the reply
        self.bind_calls = 0
        self.prioritize_calls = 0

    def interested(self, pod: dict[str, Any]) -> bool:
        """kube-scheduler's IsInterested: no managedResources, or the pod asks for one of them."""
        if not self.cfg.managed_resources:
            return True
        wanted = _pod_requests(pod)
        return any(mr.name in wanted for mr in self.cfg.managed_resources)

    def _post(self, verb: str, args: dict[str, Any]) -> dict[str, Any]:
        return _lower_keys(self._send(verb, args))

    def _send(self, verb: str, args: dict[str, Any]) -> Any:
        url = f"{self.url}/{verb}"
        try:
            resp = self._http.request(
                "POST", url, body=json.dumps(args).encode(), headers={"Content-Type": "application/json"}
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ExtenderError(f'Post "{url}": {exc}') from exc
        if resp.status != 200:
            raise ExtenderError(f"failed {verb} with extender at URL {url}, code {resp.status}")
        try:
            return json.loads(resp.data)
        except ValueError as exc:
            raise ExtenderError(f"extender at URL {url} answered {verb} with invalid JSON: {exc}") from exc

    def filter(self, pod: dict[str, Any], nodes: list[dict[str, Any]]) -> FilterResult:
        names = [n["metadata"]["name"] for n in nodes]
        if self.cfg.node_cache_capable:
            args = {"Pod": pod, "Nodes": None, "NodeNames": names}
        else:
            args = {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
        self.filter_calls += 1
        started = time.perf_counter()
        try:
            result = self._post(self.cfg.filter_verb, args)
        finally:
            self.filter_seconds += time.perf_counter() - started
        if result.get("error"):
            raise ExtenderError(str(result["error"]))
        known = set(names)
        out: list[str] = []
        if self.cfg.node_cache_capable and result.get("nodenames") is not None:
            for name in result["nodenames"]:
                if name not in known:
                    raise ExtenderError(
                        f'extender "{self.url}" claims a filtered node "{name}" which is not '
                        "found in the input node list"
                    )
                out.append(name)
        elif result.get("nodes") is not None:
            for item in (result["nodes"] or {}).get("items") or []:
                name = (item.get("metadata") or {}).get("name", "")
                if name not in known:
                    raise ExtenderError(
                        f'extender "{self.url}" claims a filtered node "{name}" which is not '
                        "found in the input node list"
                    )
                out.append(name)
        return FilterResult(
            out, dict(result.get("failednodes") or {}), dict(result.get("failedandunresolvablenodes") or {})
        )

    def prioritize(self, pod: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, int]:
        """Host -> what this extender adds to its total score (score × weight × 100/10); {} without
        a prioritizeVerb. ExtenderError when the call fails (the caller skips it)."""
        if not self.cfg.prioritize_verb:
            return {}
        names = [n["metadata"]["name"] for n in nodes]
        if self.cfg.node_cache_capable:
            args = {"Pod": pod, "Nodes": None, "NodeNames": names}
        else:
            args = {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
        self.prioritize_calls += 1
        combined: dict[str, int] = {}
        for host, score in _host_scores(self._send(self.cfg.prioritize_verb, args), self.url):
            combined[host] = combined.get(host, 0) + score * self.cfg.weight
        return {h: s * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY) for h, s in combined.items()}

    def bind(self, pod: dict[str, Any], node: str) -> None:
        meta = pod["metadata"]
        args = {
            "PodName": meta["name"],
            "PodNamespace": meta.get("namespace", ""),
            "PodUID": meta.get("uid", ""),
            "Node": node,
        }
        self.bind_calls += 1
        result = self._post(self.cfg.bind_verb, args)
        if result.get("error"):
            raise ExtenderError(str(result["error"]))

    def close(self) -> None:
        self._http.clear()
