"""Run the simulated kube-scheduler as a process.

    python -m sim.scheduler --config scheduler-config.yaml --kubeconfig kubeconfig.yaml

Prints one JSON line `{"ready": true, "profiles": [...]}` once its caches are synced, a JSON stats
line on exit, and runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time

from kubernetes import config as kubeconfig

from sim.scheduler.config import ConfigError, load
from sim.scheduler.scheduler import Scheduler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sim.scheduler",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, help="KubeSchedulerConfiguration YAML file")
    parser.add_argument("--kubeconfig", required=True, help="kubeconfig of the API server to use")
    parser.add_argument(
        "--initial-backoff", type=float, default=None, help="seconds (default from config: 1)"
    )
    parser.add_argument("--max-backoff", type=float, default=None, help="seconds (default from config: 10)")
    parser.add_argument(
        "--hostname",
        default=None,
        help="hostname part of the leader-election identity (default: this machine's)",
    )
    args = parser.parse_args(argv)
    try:
        cfg = load(args.config)
    except ConfigError as exc:
        print(f"error: --config {args.config}: {exc}", file=sys.stderr)
        return 2
    api = kubeconfig.new_client_from_config(config_file=args.kubeconfig)
    sched = Scheduler(
        cfg, api, initial_backoff=args.initial_backoff, max_backoff=args.max_backoff, hostname=args.hostname
    ).start()
    received: list[int] = []  # appended by the handler: Event.set from a handler can deadlock
    signal.signal(signal.SIGTERM, lambda signum, _frame: received.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    sched.wait_synced(30)
    print(json.dumps({"ready": True, "profiles": list(cfg.scheduler_names)}), flush=True)
    while not received and not (sched.elector is not None and sched.elector.lost):
        time.sleep(0.2)
    sched.stop()
    print(json.dumps({"stats": dataclasses.asdict(sched.stats)}), flush=True)
    if sched.elector is not None and sched.elector.lost:
        print("leaderelection lost", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
