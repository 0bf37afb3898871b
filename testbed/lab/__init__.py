"""`dynmig lab`: the whole system on one machine, with simulated GPUs and a simulated cluster.

dynmig lab                                 # start, show progress, run until Ctrl-C
dynmig lab --scenario tour                 # a scripted scenario; exit 1 if a check fails
dynmig lab --scenario list                 # the scenarios
dynmig lab --serve --kubeconfig-out kc     # run until interrupted; kubectl --kubeconfig kc ...
dynmig lab --page                          # also serve the live slice-map page (its URL is printed)
dynmig lab --nodes 'gpu-dra=2xA100-SXM4-40GB@dra' --scenario dra   # a node in DRA mode
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.nodes import DEFAULT_NODES, LabNode, NodeSpecError, parse_nodes

if TYPE_CHECKING:
    from lab.cluster import Lab

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DRA_EXAMPLE = "gpu-dra=2xA100-SXM4-40GB@dra"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dynmig lab",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[2:]),
    )
    p.add_argument(
        "--nodes",
        default=DEFAULT_NODES,
        help=f"simulated GPU nodes, NAME=COUNTxMODEL[+COUNTxMODEL][@dra];... (default {DEFAULT_NODES!r}; "
        "@dra: the node runs dynmig's DRA plugin instead of the device plugin)",
    )
    p.add_argument("--scenario", help="run a scripted scenario and exit (`list` shows them)")
    p.add_argument(
        "--serve", action="store_true", help="keep running until interrupted (the default without --scenario)"
    )
    p.add_argument("--kubeconfig-out", type=Path, help="write an admin kubeconfig here once the lab is ready")
    p.add_argument(
        "--policy",
        type=Path,
        help="device-config file (allowlist) instead of the chart's default, "
        "e.g. policies/examples/with-4g.yaml",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        help="keep state files, configs and logs here (default: a temp dir, removed at exit)",
    )
    p.add_argument(
        "--page",
        action="store_true",
        help="install the chart with server.page.enabled: dynmig serve's live slice-map page",
    )
    p.add_argument(
        "--serve-replicas",
        type=int,
        default=1,
        choices=range(1, 4),
        metavar="N",
        help="scheduler pods (server.replicas, 1 to 3): each runs its own kube-scheduler, leader "
        "election on, and its own dynmig serve following that Lease (default 1)",
    )
    p.add_argument(
        "--reconcile-interval",
        type=float,
        default=1.0,
        help="device plugin reclaim period in seconds (default 1; HAMi uses 5)",
    )
    return p


def _print(line: str) -> None:
    print(line, flush=True)


def _list() -> int:
    from lab.scenarios import SCENARIOS

    width = max(len(n) for n in SCENARIOS)
    for s in SCENARIOS.values():
        print(f"{s.name:<{width}}  {s.title}")
    return EXIT_OK


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = (parser or build_parser()).parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.scenario == "list":
        return _list()
    try:
        nodes = parse_nodes(args.nodes)
    except NodeSpecError as error:
        print(f"dynmig lab: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.policy is not None and not args.policy.is_file():
        print(f"dynmig lab: --policy {args.policy}: no such file", file=sys.stderr)
        return EXIT_USAGE
    from lab.scenarios import SCENARIOS

    if args.scenario and args.scenario not in SCENARIOS:
        print(
            f"dynmig lab: --scenario {args.scenario!r}: unknown; one of: list, {', '.join(SCENARIOS)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.scenario:
        chosen = SCENARIOS[args.scenario]
        eligible = [n for n in nodes if n.dra == chosen.dra]  # a DRA node runs no device plugin
        if chosen.dra and not eligible:
            print(
                f"dynmig lab: --scenario {args.scenario} needs a node in DRA mode; --nodes {args.nodes!r} "
                f"has none (e.g. --nodes '{DRA_EXAMPLE}')",
                file=sys.stderr,
            )
            return EXIT_USAGE
        missing = [
            m
            for m in chosen.needs
            if not any(m.lower() in g.model.nvml_name.lower() for n in eligible for g in n.gpus)
        ]
        if missing:
            print(
                f"dynmig lab: --scenario {args.scenario} needs a node with {', '.join(missing)} GPUs; "
                f"--nodes {args.nodes!r} has none"
                + (
                    f" in DRA mode (e.g. {DRA_EXAMPLE!r})" if chosen.dra else " (the default nodes have them)"
                ),
                file=sys.stderr,
            )
            return EXIT_USAGE
    return _run(args, nodes)


class _SignalFlag:
    """Set from a signal handler without taking a lock: Event.set there can deadlock when the signal
    lands while the main thread is inside Event.wait, holding the Event's lock."""

    def __init__(self) -> None:
        self._signals: list[int] = []

    def set(self, signum: int = 0, _frame: object = None) -> None:
        self._signals.append(signum)

    def is_set(self) -> bool:
        return bool(self._signals)


def _run(args: argparse.Namespace, nodes: tuple[LabNode, ...]) -> int:
    from lab.chart import ChartError
    from lab.cluster import Lab, LabError, write_admin_kubeconfig
    from lab.supervisor import ChildFailed

    stop = _SignalFlag()
    previous = {sig: signal.signal(sig, stop.set) for sig in (signal.SIGINT, signal.SIGTERM)}
    lab = Lab(
        nodes,
        args.workdir,
        policy=args.policy,
        echo=_print,
        reconcile_interval=args.reconcile_interval,
        page=args.page,
        serve_replicas=args.serve_replicas,
        **_installed_with(args.scenario),
    )
    _print("dynmig lab: " + "; ".join(f"{n.name}: {n.describe()}" for n in nodes))
    try:
        try:
            lab.start()
        except (ChartError, LabError, ChildFailed, TimeoutError) as error:
            print(f"dynmig lab: could not start: {error}", file=sys.stderr)
            return EXIT_FAILED
        if stop.is_set():
            return EXIT_FAILED
        if args.kubeconfig_out:
            path = write_admin_kubeconfig(lab, args.kubeconfig_out)
            _print(f"kubeconfig written: {path}  (kubectl --kubeconfig {path} get nodes)")
        if args.page:
            _print(f"live page: {lab.page_url}  (read-only; open it in a browser)")
        if args.scenario:
            return _scenario(lab, args.scenario)
        _print(
            "lab running; Ctrl-C stops it. Finish a pod's workload with: "
            "kubectl annotate pod NAME lab.dynmig.io/exit-code=0"
        )
        while not stop.is_set():
            time.sleep(0.2)
        _print("stopping")
        return EXIT_OK
    finally:
        lab.stop()
        _print("lab stopped: child processes ended, sockets and temp files removed")
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _installed_with(name: str | None) -> dict[str, Any]:
    """What a scenario's lab is installed with (its device config, unless --policy gives one, and
    chart values): the hami-handover scenario's allowlist and allocationWriters."""
    if not name:
        return {}
    from lab.scenarios import SCENARIOS

    chosen = SCENARIOS[name]
    return {"policy_text": chosen.policy_text, "json_values": chosen.json_values}


def _scenario(lab: Lab, name: str) -> int:
    from lab import report
    from lab.scenario import Run, ScenarioFailed
    from lab.scenarios import SCENARIOS

    chosen = SCENARIOS[name]
    _print("")
    _print(f"### scenario {name}: {chosen.title}")
    run = Run(lab, echo=_print)
    started = time.monotonic()
    try:
        chosen.run(run)
    except ScenarioFailed:
        pass
    except Exception as error:  # noqa: BLE001 - a scenario step that breaks is a failed check, not a traceback
        run.check(
            False, "the scenario ran to its end", f"{type(error).__name__}: {report.shorten(str(error), 300)}"
        )
    passed = len(run.checks) - len(run.failed)
    _print("")
    verdict = "PASSED" if not run.failed and run.checks else "FAILED"
    _print(
        f"### {name}: {verdict} — {passed}/{len(run.checks)} checks passed in {time.monotonic() - started:.1f}s"
    )
    for check in run.failed:
        _print(f"    FAIL  {check.text} — {check.detail}")
    return EXIT_OK if verdict == "PASSED" else EXIT_FAILED
