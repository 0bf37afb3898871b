"""Run production code in this process against the simulated NVML.

    python -m sim.nvml.launch --state /tmp/node.json [--spec '{"gpus": [...]}' | --spec @spec.json] \\
        -- device-plugin --node-name n1 ...          # runs dynmig.cli.main(argv)
    python -m sim.nvml.launch --state FILE -- package.module:function arg ...   # function(argv)

The state file is shared: a test or the lab opens the same file with
`SimulatedNvml(state_path=FILE)` to watch, inject faults, or mark GPUs busy. Production code never
imports `sim`; only this launcher does, before handing over.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from sim.nvml.simulator import SimulatedNvml


def _spec(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    raw = Path(text[1:]).read_text() if text.startswith("@") else text
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        raise SystemExit(f"--spec: not valid JSON ({error}); pass JSON text or @path/to/spec.json") from None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" in args:
        split = args.index("--")
        ours, target = args[:split], args[split + 1 :]
    else:
        ours, target = args, []
    parser = argparse.ArgumentParser(prog="python -m sim.nvml.launch")
    parser.add_argument("--state", required=True, help="JSON state file shared with observers")
    parser.add_argument(
        "--spec", help="node spec JSON (or @file) used when the state file does not exist yet"
    )
    opts = parser.parse_args(ours)
    if not target:
        parser.error("give the program after `--`: dynmig arguments or module:function")
    SimulatedNvml(_spec(opts.spec), state_path=opts.state).install()
    if ":" in target[0] and not target[0].startswith("-"):
        module_name, function = target[0].split(":", 1)
        return int(getattr(importlib.import_module(module_name), function)(target[1:]) or 0)
    from dynmig.cli import main as dynmig_main

    return dynmig_main(target)


if __name__ == "__main__":
    sys.exit(main())
