"""Run the simulated API server as a process.

    python -m sim.apiserver --port 0 --kubeconfig-out DIR_OR_FILE [--https] [--identity admin]

Prints one JSON line `{"ready": true, "url": ..., "kubeconfigs": {identity: path}}` on stdout when
it serves, then runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from sim.apiserver.identities import write_kubeconfig
from sim.apiserver.server import ApiServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sim.apiserver",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 lets the OS choose (default)")
    parser.add_argument("--https", action="store_true", help="serve TLS with a self-signed certificate")
    parser.add_argument(
        "--kubeconfig-out",
        required=True,
        help="a file path (kubeconfig of --identity) or an existing directory "
        "(one kubeconfig-<identity>.yaml per identity)",
    )
    parser.add_argument(
        "--identity", default="admin", help="identity written when --kubeconfig-out is a file"
    )
    parser.add_argument(
        "--no-reap",
        action="store_true",
        help="keep gracefully deleted pods until something deletes them with grace 0",
    )
    args = parser.parse_args(argv)

    server = ApiServer(args.host, args.port, https=args.https, reap_after_grace=not args.no_reap).start()
    out = Path(args.kubeconfig_out)
    written = {}
    if out.is_dir():
        for name, ident in server.identities.items():
            written[name] = str(
                write_kubeconfig(out / f"kubeconfig-{name}.yaml", server.url, ident, server.cert_pem or None)
            )
    else:
        if args.identity not in server.identities:
            parser.error(f"--identity {args.identity!r}: known identities are {sorted(server.identities)}")
        written[args.identity] = str(
            write_kubeconfig(out, server.url, server.identities[args.identity], server.cert_pem or None)
        )
    received: list[int] = []  # appended by the handler: Event.set from a handler can deadlock
    signal.signal(signal.SIGTERM, lambda signum, _frame: received.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    print(json.dumps({"ready": True, "url": server.url, "kubeconfigs": written}), flush=True)
    while not received:
        time.sleep(0.2)
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
