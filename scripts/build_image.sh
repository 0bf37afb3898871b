#!/usr/bin/env bash
# `make image`: the Containerfile's image built without a container engine, from a Debian mirror and PyPI.
#
#   scripts/build_image.sh OUT.tar IMAGE_NAME
#
# 1. the dynmig wheel, built from a clean copy of the source tree (scripts/build_wheel.sh);
# 2. its dependencies as wheels, exactly image/requirements.lock (versions and sha256 hashes);
# 3. a Debian bookworm root filesystem from mmdebstrap with python3, a venv /opt/dynmig holding the
#    wheels (installed offline from step 2, byte-compiled with hash-checked .pyc so a read-only root
#    filesystem never needs writing), and the non-root user dynmig (65532), as the Containerfile does;
# 4. one layer, the image config (entrypoint dynmig, user 65532) and the tag, assembled with umoci into
#    an OCI layout and packed as an OCI archive that `docker load`, `ctr image import` and
#    `skopeo copy oci-archive:` accept.
# Timestamps come from SOURCE_DATE_EPOCH (default: the last commit's time).
set -euo pipefail

out=${1:?usage: build_image.sh OUT.tar IMAGE_NAME}
name=${2:?usage: build_image.sh OUT.tar IMAGE_NAME}
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
suite=${DEBIAN_SUITE:-bookworm}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
tag=${name##*:}
version=$("$python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
  "$root/pyproject.toml")

for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null || { echo "make image: $tool not found (make image-tools installs it)" >&2; exit 3; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/dynmig-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
step() { printf '== %s (%ss)\n' "$1" "$SECONDS"; }

step "wheel from a clean copy of the source tree"
PYTHON=$python "$root/scripts/build_wheel.sh" "$work/wheels"

step "dependencies: the wheels pinned in image/requirements.lock"
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.11 --implementation cp --abi cp311 \
  --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
  --require-hashes -r "$root/image/requirements.lock" --dest "$work/wheels"
cp "$root/image/requirements.lock" "$work/wheels/"

step "root filesystem: Debian $suite, python3, /opt/dynmig, user dynmig"
# The customize hooks run after the packages are installed, against the new root filesystem in "$1".
# No manuals, docs or translations in the image (dpkg never unpacks them; copyright files stay).
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv --format=tar \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook="copy-in $work/wheels /tmp" \
  --customize-hook='chroot "$1" python3 -m venv /opt/dynmig' \
  --customize-hook='chroot "$1" /opt/dynmig/bin/pip install --quiet --no-index --find-links /tmp/wheels --no-cache-dir --no-compile --disable-pip-version-check --require-hashes -r /tmp/wheels/requirements.lock' \
  --customize-hook='chroot "$1" sh -c "/opt/dynmig/bin/pip install --quiet --no-index --find-links /tmp/wheels --no-cache-dir --no-compile --disable-pip-version-check --no-deps /tmp/wheels/dynmig-*.whl"' \
  --customize-hook='chroot "$1" /opt/dynmig/bin/pip check || { echo "image/requirements.lock is stale: run make image-lock" >&2; exit 1; }' \
  --customize-hook='chroot "$1" /opt/dynmig/bin/pip uninstall --quiet --yes pip setuptools' \
  --customize-hook='chroot "$1" /opt/dynmig/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/dynmig/lib' \
  --customize-hook='chroot "$1" useradd --system -K SYS_UID_MAX=65532 -K SYS_GID_MAX=65532 --uid 65532 --user-group --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin dynmig' \
  --customize-hook='rm -rf "$1"/tmp/wheels "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*.log "$1"/var/cache/ldconfig/aux-cache' \
  "$suite" "$work/rootfs.tar"

step "OCI image $name"
layout=$work/oci
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci raw add-layer --image "$layout:$tag" --history.created "$created" \
  --history.created_by "scripts/build_image.sh (mmdebstrap $suite + dynmig $version)" "$work/rootfs.tar"
umoci config --image "$layout:$tag" --created "$created" --history.created "$created" --author dynmig \
  --architecture amd64 --os linux --config.user 65532:65532 --config.workingdir / \
  --config.env PATH=/opt/dynmig/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env PYTHONUNBUFFERED=1 --config.entrypoint dynmig --config.cmd serve \
  --config.label "org.opencontainers.image.title=dynmig" \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.source=Containerfile"
umoci gc --layout "$layout"
# docker load and ctr import name the image from this annotation of the index
"$python" - "$layout/index.json" "$name" <<'PY'
import json, sys
path, name = sys.argv[1], sys.argv[2]
index = json.load(open(path))
for manifest in index["manifests"]:
    manifest.setdefault("annotations", {})["io.containerd.image.name"] = name
json.dump(index, open(path, "w"), separators=(",", ":"), sort_keys=True)
PY
mkdir -p "$(dirname "$out")"
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner -C "$layout" -cf "$out.part" .
mv "$out.part" "$out"
step "wrote $out ($(du -h "$out" | cut -f1)), $name"
