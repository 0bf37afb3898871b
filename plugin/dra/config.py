"""Flags of `dynmig dra-plugin` (each also read from DYNMIG_<NAME>, base/flags.py). Errors name the
flag and the fix: a DRA plugin that starts half-configured could publish devices it cannot create."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from base.flags import FlagError, Flags, positive_seconds
from base.logs import FORMATS, LEVELS
from base.policyfiles import load_device_config
from mig.allowlist import DeviceConfig, PolicyError
from plugin.cdi import MIG_MINORS
from plugin.config import ConfigError as NodeConfigError
from plugin.config import DeviceFilter, load_node_config

DRIVER = "mig.dynmig.io"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL_NODE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class DraConfig:
    driver: str
    node_name: str
    device_config: DeviceConfig
    registry_dir: Path
    plugin_dir: Path
    cdi_dir: Path
    state_dir: Path
    metrics_address: str = ""
    kubeconfig: str = ""
    resync_interval: float = 10.0
    log_level: str = "info"
    log_format: str = "text"
    # the node config's filterdevices: GPUs never published or touched
    excluded: DeviceFilter = field(default_factory=DeviceFilter)
    # the CDI specs' device nodes (plugin/cdi.py): under the driver root, capability minors from the
    # driver's table; None: the specs name the device by NVIDIA_VISIBLE_DEVICES alone
    driver_root: Path = Path("/")
    mig_minors: Path | None = None
    # the node's per-GPU lock files, shared with the device plugin (plugin/instances.py node_lock);
    # None: GPUs are locked in this process only
    gpu_lock_dir: Path | None = None


def driver_name(text: str) -> str:
    if len(text) > 63 or not _DNS_SUBDOMAIN.match(text):
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r} is not a DRA driver name: a lower-case DNS subdomain of at most 63 characters"
        )
    return text


def _flags(environ: Mapping[str, str] | None) -> Flags:
    f = Flags(
        "dynmig dra-plugin", "DRA kubelet plugin: MIG devices for ResourceClaims (docs/dra.md).", environ
    )
    f.add(
        "--driver-name",
        default=DRIVER,
        type=driver_name,
        help="the DRA driver name (ResourceSlices' spec.driver)",
    )
    f.add("--node-name", default="", help="this node's name (env NODE_NAME too)", quiet_env=("NODE_NAME",))
    f.add(
        "--config-file",
        default="",
        help="the device config YAML (its migProfileAllowlist decides the profiles)",
    )
    f.add(
        "--node-config",
        default="",
        show_default="none: no GPU excluded",
        help="the device plugin's node config JSON: this node's filterdevices (uuid, index) are "
        "GPUs the DRA plugin never publishes nor touches",
    )
    f.add(
        "--registry-dir",
        default="/var/lib/kubelet/plugins_registry",
        help="kubelet's plugin registration dir",
    )
    f.add("--plugin-dir", default=f"/var/lib/kubelet/plugins/{DRIVER}", help="where the DRA socket goes")
    f.add("--cdi-dir", default="/var/run/cdi", help="where CDI specs of prepared devices are written")
    f.add(
        "--driver-root",
        default="/",
        help="the NVIDIA driver's root on the host: the CDI specs' device nodes are under its dev/",
    )
    f.add(
        "--mig-minors",
        default=str(MIG_MINORS),
        help="the driver's MIG capability table (device minors of /dev/nvidia-caps/nvidia-cap<N>)",
    )
    f.add("--state-dir", default="/var/lib/dynmig-dra", help="the ownership journal's directory (a hostPath)")
    f.add(
        "--gpu-lock-dir",
        default="/var/lib/dynmig/gpus",
        help="the per-GPU lock files the device plugin takes too (a hostPath), so the two never "
        "write one GPU at once; empty: this process only",
    )
    f.add("--metrics-address", default="", help="host:port of /metrics, /healthz and /readyz; empty: off")
    f.add("--kubeconfig", default="", help="kubeconfig file; empty: the pod's service account")
    f.add(
        "--resync-interval",
        default=10.0,
        type=positive_seconds,
        show_default="10s",
        help="how often the pool is checked against NVML and the claims even without a change",
    )
    f.add("--log-level", default="info", choices=LEVELS, help="least severe log level written")
    f.add("--log-format", default="text", choices=FORMATS, help="text or json lines")
    return f


def parser() -> argparse.ArgumentParser:
    return _flags(None).parser


def load_config(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> DraConfig:
    env = os.environ if environ is None else environ
    try:
        args = _flags(env).parse(argv)
    except FlagError as error:
        raise ConfigError(str(error)) from None
    node = args.node_name or env.get("NODE_NAME", "")
    if not node or not _DNS_LABEL_NODE.match(node):
        raise ConfigError(f"--node-name: {node[:80]!r} is not a node name; pass --node-name or set NODE_NAME")
    if not args.config_file:
        raise ConfigError("--config-file: required (the device config with nvidia.migProfileAllowlist)")
    try:
        device_config = load_device_config(args.config_file)
    except PolicyError as error:
        raise ConfigError(f"--config-file: {error}") from None
    except OSError as error:
        raise ConfigError(f"--config-file {args.config_file}: {error.strerror or error}") from None
    try:
        excluded = load_node_config(args.node_config, node).filter if args.node_config else DeviceFilter()
    except NodeConfigError as error:
        raise ConfigError(f"--node-config: {error}") from None
    return DraConfig(
        excluded=excluded,
        driver=args.driver_name,
        node_name=node,
        device_config=device_config,
        registry_dir=Path(args.registry_dir),
        plugin_dir=Path(args.plugin_dir),
        cdi_dir=Path(args.cdi_dir),
        driver_root=Path(args.driver_root),
        mig_minors=Path(args.mig_minors),
        state_dir=Path(args.state_dir),
        gpu_lock_dir=Path(args.gpu_lock_dir) if args.gpu_lock_dir else None,
        metrics_address=args.metrics_address,
        kubeconfig=args.kubeconfig,
        resync_interval=args.resync_interval,
        log_level=args.log_level,
        log_format=args.log_format,
    )
