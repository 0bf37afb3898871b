"""kubelet's checks on a Register request: API version and extended-resource name."""

from __future__ import annotations

import re

from plugin.api import SUPPORTED_VERSIONS

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def version_error(version: str) -> str | None:
    if version in SUPPORTED_VERSIONS:
        return None
    return (
        f"requested API version {version!r} is not supported by kubelet. "
        f"Supported versions are {list(SUPPORTED_VERSIONS)!r}"
    )


def resource_name_error(name: str) -> str | None:
    """An extended resource name: `domain/name`, domain not kubernetes.io, not `requests.`."""
    domain, slash, short = name.partition("/")
    valid = (
        bool(slash)
        and len(domain) <= 253
        and bool(_DNS_SUBDOMAIN.match(domain))
        and len(short) <= 63
        and bool(_NAME.match(short))
        and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))
        and not name.startswith("requests.")
    )
    return None if valid else f"the ResourceName {name!r} is invalid"
