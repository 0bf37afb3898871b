"""dynmig's version, from the installed package's metadata (pyproject.toml's `version`)."""

from __future__ import annotations

from importlib import metadata

from prometheus_client import CollectorRegistry, Info


def version() -> str:
    try:
        return metadata.version("dynmig")
    except metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
        return "0+unknown"


def register_build_info(registry: CollectorRegistry, component: str) -> None:
    """`dynmig_build_info{component, version} 1` in `registry`: which build answers on this /metrics."""
    Info("dynmig_build", "The dynmig build serving these metrics", registry=registry).info(
        {"version": version(), "component": component}
    )
