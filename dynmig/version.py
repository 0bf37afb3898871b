"""dynmig's version, from the installed package's metadata (pyproject.toml's `version`)."""

from __future__ import annotations

from importlib import metadata


def version() -> str:
    try:
        return metadata.version("dynmig")
    except metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
        return "0+unknown"
