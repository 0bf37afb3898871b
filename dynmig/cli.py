"""The `dynmig` console script: one entry point, one subcommand per process."""

from __future__ import annotations

import importlib
import sys

from dynmig.flags import apply_environment
from dynmig.version import version

# subcommand -> module with a `main(argv) -> int`
SUBCOMMANDS = {
    "serve": "webhooks.main",
    "device-plugin": "plugin.main",
    "certs": "certs.main",
    "policy": "mig.policy_cli",
    "lab": "dynmig.lab",
    "status": "dynmig.status.main",
}
ABOUT = {
    "serve": "admission webhooks and scheduler extender (one Deployment)",
    "device-plugin": "create and destroy each pod's MIG instance (one per GPU node)",
    "certs": "the webhook certificate: init, rotate, inject, show",
    "policy": "check, explain and diff MIG profile allowlists",
    "lab": "the whole system on simulated GPUs and a simulated cluster",
    "status": "the fleet's MIG slices, what still fits, why MIG pods wait (kubectl dynmig status)",
}

USAGE = "usage: dynmig [--version] {" + ",".join(SUBCOMMANDS) + "} [options]"
HELP = "\n".join(
    [
        USAGE,
        "",
        "commands:",
        *(f"  {name:<14} {ABOUT[name]}" for name in SUBCOMMANDS),
        "",
        "`dynmig COMMAND --help` lists a command's flags; every flag of every command can also be",
        "set in the environment as DYNMIG_<FLAG> (e.g. DYNMIG_LOG_FORMAT=json); the flag wins.",
    ]
)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(HELP, file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    if args[0] in ("--version", "-V", "version"):
        print(f"dynmig {version()}")
        return 0
    name, rest = args[0], args[1:]
    module_name = SUBCOMMANDS.get(name)
    if module_name is None:
        print(f"dynmig: unknown command {name!r}; {USAGE}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            print(f"dynmig {name}: not built yet", file=sys.stderr)
            return 3
        raise
    if hasattr(
        module, "build_parser"
    ):  # a plain argparse command: the DYNMIG_<FLAG> convention comes from here
        parser = module.build_parser()
        apply_environment(parser)
        return int(module.main(rest, parser=parser) or 0)
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
