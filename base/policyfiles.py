"""Device-config (policy) files: read from disk, checked by the core (`mig.allowlist`), and the default
policy dynmig ships (`policies/default.yaml`, found by `base.resources`)."""

from __future__ import annotations

from pathlib import Path

from base import resources
from mig.allowlist import Allowlist, DeviceConfig, Issue, PolicyError, check_text, device_config

DEFAULT_POLICY = resources.default_policy()


def read(path: str | Path) -> tuple[str | None, list[Issue]]:
    """A policy file's text, or None with the issue that says why it cannot be read."""
    try:
        return Path(path).read_text(), []
    except (OSError, UnicodeDecodeError) as error:
        return None, [
            Issue("(file)", f"cannot read: {getattr(error, 'strerror', None) or error}", "check the path")
        ]


def check_allowlist_file(path: str | Path, strict: bool = False) -> list[Issue]:
    """Every issue of a policy file (`dynmig policy check`)."""
    text, issues = read(path)
    return issues if text is None else check_text(text, strict)[1]


def load_device_config(path: str | Path, strict: bool = False) -> DeviceConfig:
    """Load a device-config file; raise PolicyError when it cannot be read or has any error."""
    text, issues = read(path)
    if text is None:
        raise PolicyError(str(path), issues)
    return device_config(text, str(path), strict)


def load_allowlist(path: str | Path) -> Allowlist:
    return load_device_config(path).allowlist


def default_allowlist() -> Allowlist:
    return load_allowlist(DEFAULT_POLICY)
