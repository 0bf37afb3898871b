#!/usr/bin/env bash
# The dynmig wheel, built from a clean copy of the source tree: `scripts/build_wheel.sh OUT_DIR [PROJECT]`,
# PROJECT being the folder of the pyproject.toml to build (default `.`, the product; `testbed`, the testbed).
#
# Why a copy: setuptools builds in place and keeps build/lib between builds, so a file deleted from the
# tree would still ship; a copy of what git tracks (plus new, not ignored files) ships exactly the tree.
set -euo pipefail
out=${1:?usage: build_wheel.sh OUT_DIR [PROJECT]}
project=${2:-.}
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
src=$(mktemp -d "${TMPDIR:-/tmp}/dynmig-src.XXXXXX")
trap 'rm -rf "$src"' EXIT
(cd "$root" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -C "$src" -xf -
mkdir -p "$out"
"$python" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation --wheel-dir "$out" "$src/$project"
