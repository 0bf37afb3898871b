"""The `dynmig` console script: one entry point, one subcommand per process."""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points
from types import ModuleType

from base.flags import apply_environment
from base.version import version

# subcommand -> module with a `main(argv) -> int`
SUBCOMMANDS = {
    "serve": "webhooks.main",
    "device-plugin": "plugin.main",
    "dra-plugin": "plugin.dra.main",
    "certs": "certs.main",
    "policy": "dynmig.policy",
    "status": "dynmig.status.main",
}
# commands another distribution adds through this entry-point group; the product itself carries none
# (the testbed's `lab`: the whole system on simulated GPUs, for a laptop and CI, never for a cluster)
COMMAND_GROUP = "dynmig.commands"
ELSEWHERE = {
    "lab": "the lab comes with dynmig's testbed, not with the product: from a dynmig checkout run "
    "`make lab`, or `pip install ./testbed` and then `dynmig lab`",
}
ABOUT = {
    "serve": "admission webhooks and scheduler extender (one Deployment)",
    "device-plugin": "create and destroy each pod's MIG instance (one per GPU node)",
    "dra-plugin": "DRA kubelet plugin: MIG devices for ResourceClaims (node pools in DRA mode)",
    "certs": "the webhook certificate: init, rotate, inject, show",
    "policy": "check, explain and diff MIG profile allowlists",
    "lab": "the whole system on simulated GPUs and a simulated cluster (with the testbed)",
    "status": "the fleet's MIG slices, what still fits, why MIG pods wait (kubectl dynmig status)",
}

USAGE = "usage: dynmig [--version] {" + ",".join([*SUBCOMMANDS, *ELSEWHERE]) + "} [options]"
HELP = "\n".join(
    [
        USAGE,
        "",
        "commands:",
        *(f"  {name:<14} {ABOUT[name]}" for name in [*SUBCOMMANDS, *ELSEWHERE]),
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
    module = _command(name)
    if module is None:
        if name in ELSEWHERE:
            print(f"dynmig {name}: {ELSEWHERE[name]}", file=sys.stderr)
            return 3
        print(f"dynmig: unknown command {name!r}; {USAGE}", file=sys.stderr)
        return 2
    if hasattr(
        module, "build_parser"
    ):  # a plain argparse command: the DYNMIG_<FLAG> convention comes from here
        parser = module.build_parser()
        apply_environment(parser)
        return int(module.main(rest, parser=parser) or 0)
    return int(module.main(rest) or 0)


def _command(name: str) -> ModuleType | None:
    """The module that runs `dynmig NAME`: the product's own, else one an installed distribution adds."""
    if name in SUBCOMMANDS:
        return importlib.import_module(SUBCOMMANDS[name])
    for found in entry_points(group=COMMAND_GROUP, name=name):
        loaded = found.load()
        if isinstance(loaded, ModuleType):
            return loaded
    return None


if __name__ == "__main__":
    sys.exit(main())
