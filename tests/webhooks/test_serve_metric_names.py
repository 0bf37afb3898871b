"""`dynmig serve`'s /metrics, as Prometheus scrapes it from the metrics port, exposes exactly the
names the README lists (counters with `_total`, HAMi's scheduler series, the process and Python
runtime series), with its own certificate managed (--cert-mode self) as the chart runs it."""

from __future__ import annotations

import urllib.request

from test_serve_certificates import TLS_SECRET, Serve, cluster  # noqa: F401 - `cluster` is a fixture
from waiting_testkit import eventually
from webhooks_testkit import node

from tests.metrics_testkit import documented, exposed


def test_serves_metrics_are_the_readmes_list_both_ways(cluster):  # noqa: F811 - the imported fixture
    cluster.create(node("n1", "A100-SXM4-40GB"))
    replica = Serve(cluster, ["--tls-secret", TLS_SECRET, "--cert-mode", "self"], "serve-a")
    try:
        assert eventually(lambda: replica.service.fleet.occupancy("n1") is not None)

        with urllib.request.urlopen(replica.listeners.metrics_url, timeout=5) as reply:
            page = reply.read().decode()
    finally:
        replica.stop()

    names, listed = exposed(page), documented("serve")
    assert names - listed == set(), "exposed but not in the README"
    assert listed - names == set(), "in the README but not exposed"
    assert "process_cpu_seconds_total" in names and "python_gc_collections_total" in names
