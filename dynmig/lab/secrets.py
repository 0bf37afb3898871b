"""A Secret projected into files, as kubelet does for a Secret volume.

Why: `dynmig serve` reads its serving certificate from files (the chart mounts the Secret), and the
simulated kube-scheduler reads the extender CA from a file. In the lab nothing mounts volumes, so
this thread plays kubelet's part: it keeps the files equal to the Secret, so `dynmig certs rotate`
reaches the server exactly the way it does in a cluster.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("dynmig.lab.secrets")


class SecretProjection:
    def __init__(self, apiserver: Any, namespace: str, name: str, directory: Path, interval: float = 0.5):
        self.apiserver, self.namespace, self.name = apiserver, namespace, name
        self.directory = directory
        self.interval = interval
        self.version = ""
        self.updates = 0
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"project-{name}", daemon=True)

    def path(self, key: str) -> Path:
        return self.directory / key

    def start(self) -> SecretProjection:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.sync()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def sync(self) -> bool:
        """Write the Secret's keys if it changed; True when files were written."""
        secret = self.apiserver.get("secrets", self.name, self.namespace)
        if secret is None or secret["metadata"].get("resourceVersion") == self.version:
            return False
        for key, value in (secret.get("data") or {}).items():
            _write_atomically(self.directory / key, base64.b64decode(value))
        with self._changed:
            self.version = secret["metadata"]["resourceVersion"]
            self.updates += 1
            self._changed.notify_all()
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception as error:  # noqa: BLE001 - an unavailable API server; try again next time
                log.debug("projecting Secret %s/%s: %s", self.namespace, self.name, error)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
