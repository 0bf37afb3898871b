"""dynmig status: where the fleet's MIG slices are, what still fits, and why MIG pods wait.

Read-only (lists nodes and pods); works against any kubeconfig and as a kubectl plugin:
`kubectl dynmig status`. The counts of what still fits come from the scheduler's own placement
engine over the scheduler's own reading of the annotations, so they are what the scheduler does.

examples:
  dynmig status                         every node with MIG GPUs, then pending MIG pods
  kubectl dynmig status --node gpu-a100 one node
  dynmig status -o json | jq .fits      the fleet's counts of each profile that still fits
  dynmig status --watch                 re-draw when something changes (Ctrl-C ends it)
  dynmig status --device-config FILE    read pods by the resource names in serve's device config

Pods are read by the resource names of dynmig serve's device config: the ConfigMap labelled
dynmig.io/device-config=true (read at start), or --device-config FILE.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

import yaml

from base.flags import dra_driver
from dynmig.status import names
from dynmig.status.names import SELECTOR
from dynmig.status.render import Style, render
from dynmig.status.source import Cluster, Source, StatusError, api_client
from mig.allowlist import ResourceNames
from mig.defrag.advisor import status_advisor
from mig.dra.pending import pending_claim_pods
from mig.dra.view import dra_view
from mig.fleetview import Advisor, Restriction, fleet_view
from mig.placement import GpuState, PodRequest
from mig.pods import DEFAULT_SCHEDULER
from mig.slicemap import FleetMap, to_dict

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DRA_DRIVER = "mig.dynmig.io"  # the chart's draPlugin.driverName
OUTPUTS = ("text", "wide", "json", "yaml")
CLEAR = "\x1b[H\x1b[2J"


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.2 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text} is out of range; use 0.2 to 3600 seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(
        prog="dynmig status",
        description=doc.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(doc.splitlines()[2:]),
    )
    p.add_argument(
        "--node", action="append", default=[], help="show only this node (repeat or comma-separate)"
    )
    p.add_argument(
        "-n",
        "--namespace",
        default="",
        help="show only this namespace's pending pods (slices are shared: the map counts every namespace)",
    )
    p.add_argument(
        "-o", "--output", default="text", choices=OUTPUTS, help="text (default), wide, json or yaml"
    )
    p.add_argument("--watch", "-w", action="store_true", help="re-draw on every change until Ctrl-C")
    p.add_argument(
        "--interval", type=_interval, default=2.0, help="seconds between reads with --watch (default 2)"
    )
    p.add_argument(
        "--watch-for", type=_interval, default=None, help="with --watch, stop after this many seconds"
    )
    p.add_argument(
        "--device-config",
        default="",
        metavar="FILE",
        help="the device config dynmig serve reads, for its resource names (default: the ConfigMap "
        f"labelled {SELECTOR}, else nvidia.com/gpu, nvidia.com/gpumem, ...)",
    )
    p.add_argument(
        "--dra-driver",
        default=DRA_DRIVER,
        type=dra_driver,
        metavar="NAME",
        help=f"the DRA driver whose ResourceSlices and claims are drawn as DRA nodes (default {DRA_DRIVER})",
    )
    p.add_argument(
        "--scheduler-name",
        default=DEFAULT_SCHEDULER,
        metavar="NAME",
        help=f"dynmig's scheduler name (the chart's schedulerName, default {DEFAULT_SCHEDULER}): a pending "
        "pod naming another scheduler is said to be that scheduler's",
    )
    p.add_argument("--kubeconfig", default="", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", default="", help="kubeconfig context (default: its current context)")
    p.add_argument(
        "--color",
        default="auto",
        choices=("auto", "always", "never"),
        help="auto (default): colour when stdout is a terminal and NO_COLOR is not set",
    )
    return p


def use_color(choice: str, stream: TextIO, environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    if choice != "auto":
        return choice == "always"
    return not environ.get("NO_COLOR") and stream.isatty() and environ.get("TERM") != "dumb"


def _nodes(values: list[str]) -> tuple[str, ...]:
    return tuple(n.strip() for v in values for n in v.split(",") if n.strip())


def resource_names(source: Source, args: argparse.Namespace, err: TextIO) -> ResourceNames:
    """The names pods are read by (see `dynmig.status.names`); warnings go to `err`."""
    try:
        if args.device_config:
            found = names.from_file(args.device_config)
        else:
            found = names.from_config_maps(source.device_configs(SELECTOR))
    except names.NamesError as error:
        raise StatusError(str(error)) from None
    for warning in found.warnings:
        print(f"dynmig status: warning: {warning}", file=err)
    return found.names


def snapshot(source: Source, args: argparse.Namespace, resources: ResourceNames | None = None) -> FleetMap:
    cluster = source.read()
    fleet = fleet_view(
        cluster.nodes,
        cluster.pods,
        names=resources,
        only_nodes=_nodes(args.node),
        advisor=_advisor(cluster, resources),
        scheduler=args.scheduler_name,
    )
    fleet = with_dra(fleet, cluster, args)
    missing = [n for n in _nodes(args.node) if n not in {m.name for m in fleet.nodes}]
    if missing:
        raise StatusError(f"--node: no node named {', '.join(missing)} in the cluster")
    if args.namespace:
        fleet = FleetMap(
            fleet.nodes,
            fleet.fits,
            tuple(p for p in fleet.pending if p.namespace == args.namespace),
            tuple(u for u in fleet.unreadable_pods if u[0].split("/", 1)[0] == args.namespace),
        )
    return fleet


def with_dra(fleet: FleetMap, cluster: Cluster, args: argparse.Namespace) -> FleetMap:
    """The map with the DRA nodes added (`mig.dra.view`): what kube-scheduler allocated from the
    driver's ResourceSlices. What cannot be read is said once per draw, on stderr."""
    fleet = _with_pending_claims(fleet, cluster, args)
    if not cluster.slices:
        return fleet
    view = dra_view(cluster.slices, cluster.claims or (), args.dra_driver)
    if view.problems:
        shown = "; ".join(view.unreadable[:3])
        print(
            f"dynmig status: warning: {view.problems} DRA object(s) could not be drawn: {shown}",
            file=sys.stderr,
        )
    only = _nodes(args.node)
    dra = {n.name: n for n in view.nodes if not only or n.name in only}
    if not dra:
        return fleet
    # a DRA node publishes nothing for the extender: its extender map, if any, is empty
    kept = [n for n in fleet.nodes if n.name not in dra or n.gpus]
    extra = [n for n in dra.values() if n.name not in {m.name for m in kept}]
    # the fleet's totals stay the extender's: a pod asking for nvidia.com/gpu never lands on a DRA node
    nodes = tuple(sorted([*kept, *extra], key=lambda n: n.name))
    return FleetMap(nodes, fleet.fits, fleet.pending, fleet.unreadable_pods)


def _with_pending_claims(fleet: FleetMap, cluster: Cluster, args: argparse.Namespace) -> FleetMap:
    """The pods waiting for devices of the DRA driver join the pending list, with kube-scheduler's
    reason (`mig.dra.pending`)."""
    waiting = pending_claim_pods(cluster.pods, cluster.claims or (), args.dra_driver)
    waiting = [p for p in waiting if not args.namespace or p.namespace == args.namespace]
    if not waiting:
        return fleet
    pending = tuple(sorted([*fleet.pending, *waiting], key=lambda p: (p.namespace, p.name)))
    return FleetMap(fleet.nodes, fleet.fits, pending, fleet.unreadable_pods)


NO_BUDGETS = " (PodDisruptionBudgets could not be listed, so they were not checked)"


def _advisor(cluster: Cluster, resources: ResourceNames | None) -> Advisor:
    """Defrag advice for pods that do not fit: the scheduler's rule (webhooks.defrag), read-only."""
    advice = status_advisor(cluster.pods, cluster.pdbs or (), names=resources)
    if cluster.pdbs is not None:
        return advice

    def unchecked(
        pod: Mapping[str, Any], request: PodRequest, gpus: Sequence[GpuState], nodes: Restriction
    ) -> str:
        text = advice(pod, request, gpus, nodes)
        return text + NO_BUDGETS if text.startswith("defrag: removing") else text

    return unchecked


def format_fleet(fleet: FleetMap, output: str, style: Style) -> str:
    if output == "json":
        return json.dumps(to_dict(fleet), indent=2)
    if output == "yaml":
        return yaml.safe_dump(to_dict(fleet), sort_keys=False).rstrip("\n")
    return render(fleet, style)


def _style(args: argparse.Namespace, stream: TextIO) -> Style:
    width = shutil.get_terminal_size((100, 24)).columns
    return Style(color=use_color(args.color, stream), wide=args.output == "wide", width=max(width, 40))


def watch(
    draw: Callable[[], str],
    out: TextIO,
    interval: float,
    until: float | None,
    clear: bool,
    sleep: Callable[[float], None] = time.sleep,
    stopped: Callable[[], bool] = lambda: False,
) -> None:
    """Re-draw whenever the text changes; with `until`, stop after that many seconds. Ctrl-C ends it
    (`stopped`: it was pressed, even if the KeyboardInterrupt it raised was swallowed)."""
    deadline = None if until is None else time.monotonic() + until
    last = None
    while not stopped():
        text = draw()
        if text != last:
            out.write((CLEAR if clear else ("" if last is None else "\n---\n")) + text + "\n")
            out.flush()
            last = text
        if stopped() or (deadline is not None and time.monotonic() >= deadline):
            return
        sleep(interval)


@contextmanager
def ctrl_c_noted() -> Iterator[threading.Event]:
    """An Event set by Ctrl-C (SIGINT), which still raises KeyboardInterrupt as before.

    Python drops an exception raised while a finalizer runs ("Exception ignored in ..."), so a
    KeyboardInterrupt that lands in a socket's or response's `__del__` during garbage collection is
    lost and a watch would go on drawing; the Event is not lost. Only the main thread may set a
    signal handler: elsewhere the Event is never set and Ctrl-C behaves as Python's default."""
    pressed = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return

    def on_sigint(signum: int, frame: Any) -> None:
        pressed.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    parser = parser or build_parser()
    args = parser.parse_args(argv)
    out = sys.stdout
    try:
        source = Source(api_client(args.kubeconfig, args.context))
        style = _style(args, out)
        resources = resource_names(source, args, sys.stderr)

        def draw() -> str:
            return format_fleet(snapshot(source, args, resources), args.output, style)

        if not args.watch:
            out.write(draw() + "\n")
            return EXIT_OK
        with ctrl_c_noted() as pressed:
            clear = out.isatty() and args.output in ("text", "wide")
            watch(draw, out, args.interval, args.watch_for, clear=clear, stopped=pressed.is_set)
    except StatusError as error:
        print(f"dynmig status: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_OK
    return EXIT_OK
