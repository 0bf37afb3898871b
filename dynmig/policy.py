"""`dynmig policy`: the commands of `mig.policy_cli`, with `check --cluster` reading the cluster's nodes
and pods through a kubeconfig (read-only lists, as `dynmig status` reads them)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from dynmig.status.source import Source, StatusError, api_client
from mig import policy_cli

build_parser = policy_cli.build_parser


def read_cluster(
    kubeconfig: str | None, context: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    try:
        found = Source(api_client(kubeconfig, context)).read()
    except StatusError as error:
        raise policy_cli.ClusterError(str(error)) from None
    return found.nodes, found.pods


def main(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    return policy_cli.main(argv, parser, cluster=read_cluster)
