"""`pods/log`: what `kubectl logs` reads, from files a simulated kubelet writes.

The contract for a simulated kubelet (the lab's node agent): a container's output goes to

    <ApiServer.logs_dir>/<namespace>_<pod>_<pod uid>/<container>/0.log

(the layout of a kubelet's /var/log/pods), plain text, appended as the workload writes it;
`ApiServer.log_path(namespace, pod, uid, container)` returns that path and creates its folder.
kube-apiserver proxies `pods/log` to the kubelet, which reads the same files; here the API server
reads them itself. A container with no file yet is "waiting to start" while the pod is Pending, and
has empty output once it runs.

Options served as kube-apiserver documents them: `container` (required when the pod has several),
`tailLines`, `limitBytes`, `follow` (stream what is appended until the pod is gone or finished).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sim.apiserver.errors import ApiError

CHUNK = 64 * 1024


_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_PART = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def log_path(root: Path, namespace: str, pod: str, uid: str, container: str) -> Path:
    """The log file of one container; names that are not Kubernetes names never make a path."""
    if not (
        _LABEL.fullmatch(container)
        and _PART.fullmatch(namespace)
        and _PART.fullmatch(pod)
        and re.fullmatch(r"[-0-9a-f]{1,64}", uid)
    ):
        raise ApiError(
            400,
            f"container {container[:64]!r} of pod {pod[:64]!r}: not a valid container name "
            "(a lowercase RFC 1123 label)",
        )
    return root / f"{namespace}_{pod}_{uid}" / container / "0.log"


def choose_container(pod: dict[str, Any], asked: str) -> str:
    """The container the log is for, refused as kube-apiserver refuses a missing or wrong name."""
    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    names = [c.get("name", "") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]
    if not asked:
        regular = [c.get("name", "") for c in spec.get("containers") or []]
        if len(regular) == 1:
            return regular[0]
        raise ApiError(
            400, f"a container name must be specified for pod {name}, choose one of: [{' '.join(regular)}]"
        )
    if asked not in names:
        raise ApiError(400, f"container {asked} is not valid for pod {name}")
    return asked


def _whole(query: dict[str, str], key: str) -> int | None:
    if key not in query:
        return None
    try:
        value = int(query[key])
    except ValueError:
        value = -1
    if value < 0 or (key == "limitBytes" and value == 0):
        raise ApiError(
            422,
            f'PodLogOptions "" is invalid: {key}: Invalid value: {query[key][:32]!r}: must be '
            "a whole number" + (" greater than 0" if key == "limitBytes" else ""),
            "Invalid",
        )
    return value


def _tail_offset(path: Path, lines: int) -> int:
    """Where the last `lines` lines of the file start (read backwards in chunks, never whole)."""
    size = path.stat().st_size
    if lines == 0:
        return size
    with path.open("rb") as f:
        pos, seen = size, 0
        # A final newline ends the last line; it does not start another.
        if size:
            f.seek(size - 1)
            if f.read(1) == b"\n":
                pos -= 1
        while pos > 0:
            step = min(CHUNK, pos)
            f.seek(pos - step)
            block = f.read(step)
            for i in range(len(block) - 1, -1, -1):
                if block[i] == 0x0A:
                    seen += 1
                    if seen == lines:
                        return pos - step + i + 1
            pos -= step
    return 0


def stream(
    path: Path, pod: dict[str, Any], container: str, query: dict[str, str], still_running: Callable[[], bool]
) -> Iterator[bytes]:
    """The log bytes to send, in chunks; with follow, keeps yielding until not still_running()."""
    phase = (pod.get("status") or {}).get("phase", "Pending")
    name = pod["metadata"]["name"]
    tail, limit = _whole(query, "tailLines"), _whole(query, "limitBytes")
    follow = query.get("follow") in ("true", "1", "True")
    if not path.is_file():
        if phase == "Pending":
            raise ApiError(
                400, f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
            )
        return
    offset = _tail_offset(path, tail) if tail is not None else 0
    sent = 0
    with path.open("rb") as f:
        f.seek(offset)
        while True:
            want = CHUNK if limit is None else min(CHUNK, limit - sent)
            block = f.read(want) if want > 0 else b""
            if block:
                sent += len(block)
                yield block
                continue
            if not follow or (limit is not None and sent >= limit) or not still_running():
                return
            yield b""  # nothing new yet
            time.sleep(0.2)
