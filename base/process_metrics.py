"""The standard `process_*` and `python_*` series on a registry of our own.

prometheus_client puts these collectors on its global registry only; every dynmig process serves
its own registry (so tests can run many side by side), and gets fresh instances of the same three.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector


def register_process_collectors(registry: CollectorRegistry) -> None:
    """`process_*` (CPU seconds, resident and virtual memory, open and max file descriptors, start
    time; Linux only) and `python_*` (interpreter info, garbage collections) on `registry`."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
