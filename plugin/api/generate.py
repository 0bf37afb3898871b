"""Regenerate the kubelet gRPC stubs and their type stubs from the .proto files here (`make proto`).

    python -m plugin.api.generate [--out DIR]

For each proto (device plugin, PodResources, plugin registration, DRA v1 and v1beta1), grpc_tools
writes `import <name>_pb2` into the _grpc module (and mypy-protobuf into its .pyi);
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
PROTOS = (
    "deviceplugin.proto",
    "podresources.proto",
    "pluginregistration.proto",
    "dra_v1.proto",
    "dra_v1beta1.proto",
)
# mypy-protobuf's protoc plugins (extra "test", like grpc_tools) for the messages' .pyi and the _grpc
# module's .pyi: their stubs pass mypy --strict, which protoc's own --pyi_out does not (bare Mapping)
_PYI_PLUGINS = ("protoc-gen-mypy", "protoc-gen-mypy_grpc")


def _pyi_plugin(name: str) -> str:
    beside = Path(sysconfig.get_path("scripts")) / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: install the test extra (pip install -e '.[test]')")
    return found


def generate(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    return [path for proto in PROTOS for path in _generate_one(proto, out_dir)]


def _generate_one(proto: str, out_dir: Path) -> list[Path]:
    from grpc_tools import protoc  # build-time tool (extra "test"), not a runtime dependency

    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{HERE}",
            *(f"--plugin={name}={_pyi_plugin(name)}" for name in _PYI_PLUGINS),
            f"--python_out={out_dir}",
            f"--mypy_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            f"--mypy_grpc_out={out_dir}",
            str(HERE / proto),
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code} on {HERE / proto}")
    stem = proto.removesuffix(".proto")
    for grpc_module in (f"{stem}_pb2_grpc.py", f"{stem}_pb2_grpc.pyi"):
        _import_from_package(out_dir / grpc_module, stem)
    return [
        out_dir / f"{stem}{suffix}" for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
    ]


def _import_from_package(module: Path, stem: str) -> None:
    text = re.sub(
        rf"^import {stem}_pb2 as",
        f"from plugin.api import {stem}_pb2 as",
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
