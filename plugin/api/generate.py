"""Regenerate the device-plugin gRPC stubs and their type stubs from deviceplugin.proto (`make proto`).

    python -m plugin.api.generate [--out DIR]

grpc_tools writes `import deviceplugin_pb2` into the _grpc module (and mypy-protobuf into its .pyi);
we rewrite both to a package import so `plugin.api.deviceplugin_pb2_grpc` works, and type-checks,
wherever the package is installed. The .pyi files let mypy check our servicer and client code against
the messages' real fields: protobuf builds the message classes at run time, so without them every
message attribute is unknown to a type checker.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = "deviceplugin.proto"
OUTPUTS = (
    "deviceplugin_pb2.py",
    "deviceplugin_pb2.pyi",
    "deviceplugin_pb2_grpc.py",
    "deviceplugin_pb2_grpc.pyi",
)
# modules that refer to the messages module by its bare name, as protoc runs without a package
_PACKAGE_IMPORTS = ("deviceplugin_pb2_grpc.py", "deviceplugin_pb2_grpc.pyi")
# mypy-protobuf's protoc plugin for the _grpc module's .pyi (extra "test", like grpc_tools)
_GRPC_PYI_PLUGIN = "protoc-gen-mypy_grpc"


def _grpc_pyi_plugin() -> str:
    beside = Path(sysconfig.get_path("scripts")) / _GRPC_PYI_PLUGIN
    found = str(beside) if beside.exists() else shutil.which(_GRPC_PYI_PLUGIN)
    if found is None:
        raise RuntimeError(f"{_GRPC_PYI_PLUGIN} not found: install the test extra (pip install -e '.[test]')")
    return found


def generate(out_dir: Path) -> list[Path]:
    from grpc_tools import protoc  # build-time tool (extra "test"), not a runtime dependency

    out_dir.mkdir(parents=True, exist_ok=True)
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{HERE}",
            f"--plugin=protoc-gen-mypy_grpc={_grpc_pyi_plugin()}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            f"--mypy_grpc_out={out_dir}",
            str(HERE / PROTO),
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code} on {HERE / PROTO}")
    for name in _PACKAGE_IMPORTS:
        _import_from_package(out_dir / name)
    return [out_dir / name for name in OUTPUTS]


def _import_from_package(module: Path) -> None:
    text = re.sub(
        r"^import deviceplugin_pb2 as",
        "from plugin.api import deviceplugin_pb2 as",
        module.read_text(),
        flags=re.MULTILINE,
    )
    module.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plugin.api.generate")
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: plugin/api)")
    opts = parser.parse_args(argv)
    for path in generate(opts.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
