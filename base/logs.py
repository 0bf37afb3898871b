"""Logging for `dynmig serve` and `dynmig device-plugin`: one format for our lines and uvicorn's.

`--log-format text` (the default) writes `2026-12-01T10:00:00.123Z INFO dynmig.plugin: message pod=ns/name
node=gpu-1`; `--log-format json` writes one JSON object a line (`time`, `level`, `logger`, `msg`, and
`pod`, `node`, `gpu` when the line is about one), which log pipelines parse without a regex. A log call
names what it is about with `extra=about(pod=..., node=...)`.

uvicorn is told not to install its own handlers (`log_config=None` in webhooks/runner.py), so its
startup and error lines go through the same root handler and format.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, TextIO

LEVELS = ("debug", "info", "warning", "error", "critical")
FORMATS = ("text", "json")
CONTEXT = ("pod", "node", "gpu")  # record attributes a line may carry, in this order


def about(pod: str | None = None, node: str | None = None, gpu: str | None = None) -> dict[str, Any]:
    """`extra=` for a log call about a pod (`namespace/name`), a node and/or a GPU (UUID)."""
    return {k: v for k, v in (("pod", pod), ("node", node), ("gpu", gpu)) if v}


def _time(record: logging.LogRecord) -> str:
    stamp = dt.datetime.fromtimestamp(record.created, dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def _context(record: logging.LogRecord) -> dict[str, str]:
    return {k: str(getattr(record, k)) for k in CONTEXT if getattr(record, k, None)}


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{_time(record)} {record.levelname} {record.name}: {record.getMessage()}"
        context = " ".join(f"{k}={v}" for k, v in _context(record).items())
        if context:
            line += " " + context
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_context(record),
        }
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


class _Defaults(logging.Filter):
    """Context every line of this process is about unless it says otherwise (the plugin's node)."""

    def __init__(self, context: dict[str, Any]):
        super().__init__()
        self.context = context

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in self.context.items():
            if not getattr(record, key, None):
                setattr(record, key, value)
        return True


def setup(level: str = "info", fmt: str = "text", stream: TextIO | None = None, **context: str) -> None:
    """Route every logger (ours, uvicorn's, the Kubernetes client's) to one handler in one format.
    `context` (e.g. node=...) is added to every line that does not name its own."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    if context:
        handler.addFilter(_Defaults(about(**context)))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        named = logging.getLogger(name)
        named.handlers.clear()
        named.propagate = True
