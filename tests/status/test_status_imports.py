"""What `dynmig status` loads: the CLI reads the cluster, so it starts without serve's modules (Starlette,
the admission and scheduler code) or the plugins' (gRPC, NVML)."""

from __future__ import annotations

import subprocess
import sys

# dynmig's own server and node packages, and the libraries only they need
NOT_FOR_STATUS = ("webhooks", "plugin", "certs", "starlette", "uvicorn", "grpc", "pynvml")


def test_dynmig_status_loads_neither_serve_nor_the_plugins_nor_their_libraries():
    script = (
        "import sys, dynmig.status.main, dynmig.policy; "
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert set(loaded.stdout.split()) & set(NOT_FOR_STATUS) == set()
