"""Prometheus metrics of the device plugin, on their own registry (never the process-global one).

What an operator needs to trust the plugin with hardware: how many instances it manages, how many it
created and destroyed, every failure with its reason, every reconcile pass that skipped destruction
(and why), and how long kubelet's Allocate calls take.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import generate_latest

from base.process_metrics import register_process_collectors
from base.version import register_build_info

# A health check: (healthy, what to say). Served as 200 or 503 with the text.
Check = Callable[[], tuple[bool, str]]


class PluginMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        register_build_info(r, "device-plugin")
        register_process_collectors(r)
        self.managed = Gauge(
            "dynmig_plugin_managed_instances", "MIG instances this plugin manages", registry=r
        )
        self.creates = Counter("dynmig_plugin_instance_creates", "MIG instances created (GI+CI)", registry=r)
        self.precreates = Counter(
            "dynmig_plugin_instance_precreates",
            "MIG instances created ahead of Allocate from a bound pod's reservation",
            registry=r,
        )
        self.destroys = Counter(
            "dynmig_plugin_instance_destroys", "MIG instances destroyed (CI then GI)", ["cause"], registry=r
        )
        self.adoptions = Counter(
            "dynmig_plugin_instance_adoptions", "MIG instances adopted after a restart", registry=r
        )
        self.failures = Counter(
            "dynmig_plugin_failures", "Failed operations by reason", ["op", "reason"], registry=r
        )
        self.reconcile_skipped = Counter(
            "dynmig_plugin_reconcile_destroys_skipped",
            "Reconcile passes whose destroys were skipped, by reason",
            ["reason"],
            registry=r,
        )
        self.reconcile_passes = Counter("dynmig_plugin_reconcile_passes", "Reconcile passes run", registry=r)
        self.allocate_seconds = Histogram(
            "dynmig_plugin_allocate_seconds",
            "Latency of kubelet Allocate calls",
            ["result"],
            registry=r,
            buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.registration_publishes = Counter(
            "dynmig_plugin_node_register_publishes",
            "Times hami.io/node-nvidia-register was written",
            registry=r,
        )
        self.journal_entries = Gauge(
            "dynmig_plugin_journal_entries", "Instances the ownership journal records", registry=r
        )
        self.journal_writes = Counter(
            "dynmig_plugin_journal_writes", "Atomic writes of the ownership journal", registry=r
        )
        self.journal_problems = Counter(
            "dynmig_plugin_journal_problems",
            "Ownership journal missing, corrupt or not writable, by reason",
            ["reason"],
            registry=r,
        )
        self.journal_reclaims = Counter(
            "dynmig_plugin_journal_reclaims",
            "Instances reclaimed on the journal's proof (their pod is gone or ended)",
            registry=r,
        )
        self.busy_handovers = Counter(
            "dynmig_plugin_busy_handovers_refused",
            "Allocate refused to hand over an existing instance a process still uses",
            registry=r,
        )
        self.reclaims_stuck = Gauge(
            "dynmig_plugin_reclaims_stuck",
            "Instances whose destroy keeps failing (e.g. IN_USE) and is backing off",
            registry=r,
        )
        self.unowned_placements = Gauge(
            "dynmig_plugin_unowned_placements",
            "Instances on this node no active reservation covers, published as "
            "occupied for the scheduler, by reason",
            ["reason"],
            registry=r,
        )
        self.idle_instances = Gauge(
            "dynmig_plugin_idle_instances",
            "MIG instances kept idle after their pod ended, for a pod whose reservation matches them",
            registry=r,
        )
        self.warm_instances = Gauge(
            "dynmig_plugin_warm_instances",
            "Idle MIG instances the warm pool created for the profiles this node's pods ask most "
            "(counted in dynmig_plugin_idle_instances too)",
            registry=r,
        )
        self.warm_creates = Counter(
            "dynmig_plugin_warm_creates",
            "MIG instances the warm pool created before any pod asked",
            registry=r,
        )
        self.idle_reuse_hits = Counter(
            "dynmig_plugin_idle_reuse_hits",
            "Allocates served by handing over an idle instance (no create)",
            registry=r,
        )
        self.idle_reuse_misses = Counter(
            "dynmig_plugin_idle_reuse_misses",
            "Allocates that created an instance while idle reuse is on, by reason",
            ["reason"],
            registry=r,
        )
        self.create_seconds = Histogram(
            "dynmig_plugin_create_seconds",
            "Time to create one MIG instance (GI + CI + its MIG device), NVML included",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10),
        )
        self.destroy_seconds = Histogram(
            "dynmig_plugin_destroy_seconds",
            "Time to destroy one MIG instance (CI then GI), NVML included",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10),
        )

        self.refused = Gauge(
            "dynmig_plugin_node_refused",
            "1 while the plugin leaves this node's GPUs alone because of a neighbour (reason: "
            "mig-manager, other-device-plugin)",
            ["reason"],
            registry=r,
        )
        self.events_dropped = Counter(
            "dynmig_plugin_events_dropped",
            "Kubernetes Events not posted (queue full, or the API server refused or was unreachable)",
            ["reason"],
            registry=r,
        )

    def follow_registration(self, registered: Callable[[], bool]) -> None:
        """`dynmig_plugin_registered`: 1 while kubelet knows this plugin (read at scrape time)."""
        gauge = Gauge(
            "dynmig_plugin_registered",
            "1 while the plugin is registered with kubelet (since kubelet's last restart)",
            registry=self.registry,
        )
        gauge.set_function(lambda: 1.0 if registered() else 0.0)

    def event_dropped(self, reason: str) -> None:
        self.events_dropped.labels(reason=reason).inc()

    def fail(self, op: str, reason: str) -> None:
        self.failures.labels(op=op, reason=reason).inc()

    def skip(self, reason: str) -> None:
        self.reconcile_skipped.labels(reason=reason).inc()

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when absent): for tests and the lab."""
        found = self.registry.get_sample_value(name, labels)
        return float(found) if found is not None else 0.0

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def serve(
        self, address: str, healthz: Check | None = None, readyz: Check | None = None
    ) -> tuple[WSGIServer, threading.Thread] | None:
        """Serve /metrics (and /healthz, /readyz when given) on host:port (port 0 = any); returns
        (server, thread) or None when off."""
        if not address:
            return None
        host, _, port = address.rpartition(":")
        app = _with_checks(make_wsgi_app(self.registry), {"/healthz": healthz, "/readyz": readyz})
        server = make_server(host or "0.0.0.0", int(port), app, _ThreadingServer, handler_class=_QuietHandler)
        thread = threading.Thread(target=server.serve_forever, name="dynmig-metrics", daemon=True)
        thread.start()
        return server, thread


def _with_checks(
    metrics: Callable[..., Iterable[bytes]], checks: dict[str, Check | None]
) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        check = checks.get(environ.get("PATH_INFO", ""))
        if check is None:
            return metrics(environ, start_response)
        healthy, text = check()
        start_response(
            "200 OK" if healthy else "503 Service Unavailable",
            [("Content-Type", "text/plain; charset=utf-8")],
        )
        return [f"{text}\n".encode()]

    return app


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a probe every few seconds is not worth a log line
