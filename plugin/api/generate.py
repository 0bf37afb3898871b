"""Regenerate the device-plugin gRPC stubs from deviceplugin.proto (`make proto`).

    python -m plugin.api.generate [--out DIR]

grpc_tools writes `import deviceplugin_pb2` into the _grpc module; we rewrite it to a package
import so `plugin.api.deviceplugin_pb2_grpc` works wherever the package is installed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = "deviceplugin.proto"
OUTPUTS = ("deviceplugin_pb2.py", "deviceplugin_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    from grpc_tools import protoc  # build-time tool (extra "test"), not a runtime dependency

    out_dir.mkdir(parents=True, exist_ok=True)
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{HERE}",
            f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            str(HERE / PROTO),
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code} on {HERE / PROTO}")
    grpc_module = out_dir / "deviceplugin_pb2_grpc.py"
    text = re.sub(
        r"^import deviceplugin_pb2 as",
        "from plugin.api import deviceplugin_pb2 as",
        grpc_module.read_text(),
        flags=re.MULTILINE,
    )
    grpc_module.write_text(text)
    return [out_dir / name for name in OUTPUTS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plugin.api.generate")
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: plugin/api)")
    opts = parser.parse_args(argv)
    for path in generate(opts.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
