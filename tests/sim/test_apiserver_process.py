"""The simulated API server run as its own process, as `dynmig lab` runs it."""

from __future__ import annotations

import json
import subprocess
import sys

from kubernetes import client, config


def test_the_process_prints_readiness_and_serves_https_to_the_official_client(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim.apiserver", "--port", "0", "--https", "--kubeconfig-out", str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["ready"] and ready["url"].startswith("https://127.0.0.1:")
        api = client.CoreV1Api(config.new_client_from_config(config_file=ready["kubeconfigs"]["scheduler"]))
        assert "kube-system" in [n.metadata.name for n in api.list_namespace().items]
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
