"""Configuration of `dynmig device-plugin`: command-line flags, environment, the device-config file
and the node-config JSON.

Every error names the file (or flag) and the field, and says how to fix it, because a device plugin
that starts with a half-understood configuration could mutate GPUs it must not touch.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from base.flags import FlagError, Flags, positive_seconds
from base.logs import FORMATS, LEVELS
from base.policyfiles import load_device_config
from mig import jsontext
from mig.allowlist import Allowlist, DeviceConfig, PolicyError
from plugin.cdi import MIG_MINORS

STRATEGIES = ("envvar", "cdi", "cdi-cri", "cdi-annotations")
IDLE_SCOPES = ("namespace", "any")
MAX_WARM_POOL = 64  # a node of 8 GPUs holds at most 56 MIG instances
MAX_WARM_PROFILES = 16  # profiles a warm pool given by profile may name
_WARM_PROFILE = re.compile(r"^[1-8]g\.[0-9]{1,4}gb([-+][a-z.]{1,16})?$")  # e.g. 1g.5gb, 1g.10gb+me
WarmCounts = tuple[tuple[str, int], ...]  # (profile, warm instances), fixed by the operator
DEFAULT_KUBELET_DIR = "/var/lib/kubelet/device-plugins"
DEFAULT_SOCKET = "nvidia-gpu.sock"
DEFAULT_DEVICE_CONFIG = "/device-config.yaml"
DEFAULT_NODE_CONFIG = "/config/config.json"
DEFAULT_STATE_DIR = "/var/lib/dynmig"


class ConfigError(ValueError):
    """A configuration the plugin refuses to start with; the message names the file and field."""


@dataclass(frozen=True)
class DeviceFilter:
    """GPUs excluded by `filterdevices`: never registered, never mutated (not even at startup)."""

    uuids: frozenset[str] = frozenset()
    indexes: frozenset[int] = frozenset()

    def excludes(self, uuid: str, index: int) -> bool:
        return uuid in self.uuids or index in self.indexes


@dataclass(frozen=True)
class WarmSize:
    """A warm pool as `--warm-pool` or a node's `warmPool` gives it: `size` instances split over the
    profiles this node's own Allocates asked most, or, with `profiles`, exactly those counts (sized
    by the operator for a known burst; `size` is then their sum)."""

    size: int = 0
    profiles: WarmCounts = ()


@dataclass(frozen=True)
class NodeConfig:
    """This node's entry of the node-config JSON (`nodeconfig[]` matched by name)."""

    operating_mode: str = "hami-core"
    filter: DeviceFilter = field(default_factory=DeviceFilter)
    warm_pool: WarmSize | None = None  # `warmPool` of this node's entry: overrides --warm-pool

    @property
    def mig(self) -> bool:
        return self.operating_mode == "mig"


@dataclass(frozen=True)
class PluginConfig:
    node_name: str
    device_config: DeviceConfig
    node: NodeConfig
    kubelet_dir: Path = Path(DEFAULT_KUBELET_DIR)
    socket_name: str = DEFAULT_SOCKET
    strategy: str = "envvar"
    reconcile_interval: float = 5.0
    metrics_address: str = ""
    kubeconfig: str | None = None
    state_dir: Path | None = None  # the ownership journal's directory; None = in memory only (embedded use)
    log_level: str = "info"
    log_format: str = "text"
    idle_ttl: float = 0.0  # seconds an ended pod's instance stays for reuse; 0 = reuse off
    idle_per_gpu: int = 2  # at most this many idle instances per GPU
    idle_scope: str = "namespace"  # who may get an idle instance: the same namespace, or any pod
    precreate: bool = True  # create a bound pod's reserved instances before kubelet's Allocate
    warm_pool: int = 0  # idle instances kept ready for this node's most asked profiles; 0 = off
    warm_profiles: WarmCounts = ()  # the pool by profile, fixed (warm_pool is then their sum)
    warm_window: float = 600.0  # seconds of this node's Allocates the warm pool's choice looks at
    cdi_dir: Path = Path("/var/run/cdi")  # where --device-list-strategy=cdi writes its specs
    driver_root: Path = Path("/")  # the NVIDIA driver's root on the host: device nodes are under its dev/
    mig_minors: Path = MIG_MINORS  # the driver's MIG capability table
    pod_resources_socket: str = ""  # kubelet's PodResources socket: identifies Allocate's pod lock-free
    warnings: tuple[str, ...] = ()  # deprecated environment names seen while parsing; logged at startup

    @property
    def allowlist(self) -> Allowlist:
        return self.device_config.allowlist

    @property
    def resource_name(self) -> str:
        return self.device_config.resources.count

    @property
    def socket_path(self) -> Path:
        return self.kubelet_dir / self.socket_name

    @property
    def kubelet_socket(self) -> Path:
        return self.kubelet_dir / "kubelet.sock"


# ---------------------------------------------------------------- node config JSON (pure)


def parse_node_config(doc: Any, node_name: str, source: str) -> NodeConfig:
    """Pick this node's entry from `{"nodeconfig": [...]}`; a node without an entry gets defaults."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: must be a JSON object with a 'nodeconfig' list")
    entries = doc.get("nodeconfig", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: nodeconfig must be a list of per-node objects")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ConfigError(f"{source}: nodeconfig[{i}] must be an object with a 'name'")
        if entry.get("name") == node_name:
            return _node_entry(entry, f"{source}: nodeconfig[{i}]")
    return NodeConfig()


def _node_entry(entry: Mapping[str, Any], where: str) -> NodeConfig:
    mode = entry.get("operatingmode", "hami-core")
    if mode not in ("hami-core", "mig", "mps"):
        raise ConfigError(f"{where}.operatingmode: {mode!r} is not one of hami-core, mig, mps")
    raw = entry.get("filterdevices") or {}
    if not isinstance(raw, dict):
        raise ConfigError(f'{where}.filterdevices: must be an object like {{"uuid": [...], "index": [...]}}')
    uuids = raw.get("uuid") or []
    indexes = raw.get("index") or []
    if not isinstance(uuids, list) or not all(isinstance(u, str) and u for u in uuids):
        raise ConfigError(f"{where}.filterdevices.uuid: must be a list of GPU UUID strings")
    if not isinstance(indexes, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indexes
    ):
        raise ConfigError(f"{where}.filterdevices.index: must be a list of non-negative GPU indexes")
    warm = entry.get("warmPool")
    try:
        size = None if warm is None else warm_pool_value(warm)
    except ValueError as error:
        raise ConfigError(f"{where}.warmPool: {error}") from None
    return NodeConfig(str(mode), DeviceFilter(frozenset(uuids), frozenset(indexes)), size)


def warm_pool_value(value: object) -> WarmSize:
    """A warm pool from a node config's `warmPool`: a number (0 = off) or an object of profile to
    count, e.g. {"1g.5gb": 56}; ValueError saying what is wrong (the caller names the field)."""
    if isinstance(value, dict):
        return _warm_counts(list(value.items()))
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_WARM_POOL:
        raise ValueError(
            f"{str(value)[:40]!r} must be a whole number of instances from 0 (off) to {MAX_WARM_POOL}, "
            'or counts per MIG profile: {"1g.5gb": 56} in the node config, 1g.5gb=56 on --warm-pool'
        )
    return WarmSize(value)


def _warm_counts(items: list[tuple[object, object]]) -> WarmSize:
    if len(items) > MAX_WARM_PROFILES:
        raise ValueError(f"names {len(items)} profiles; at most {MAX_WARM_PROFILES}")
    counts: list[tuple[str, int]] = []
    for profile, count in items:
        if not isinstance(profile, str) or not _WARM_PROFILE.match(profile):
            raise ValueError(f"{str(profile)[:40]!r} is not a MIG profile name like 1g.5gb")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_WARM_POOL:
            raise ValueError(
                f"{profile}: {str(count)[:40]!r} must be a whole number from 0 to {MAX_WARM_POOL}"
            )
        if profile in dict(counts):
            raise ValueError(f"{profile} is named twice")
        counts.append((profile, count))
    total = sum(n for _, n in counts)
    if total > MAX_WARM_POOL:
        raise ValueError(f"{total} instances in all; at most {MAX_WARM_POOL} per node")
    return WarmSize(total, tuple((p, n) for p, n in counts if n > 0))


def load_node_config(path: str | Path | None, node_name: str) -> NodeConfig:
    if path is None:
        return NodeConfig(operating_mode="mig")
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read node config: {error.strerror}") from None
    try:
        doc = jsontext.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"{path}: not valid JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a node config") from None
    return parse_node_config(doc, node_name, str(path))


# ---------------------------------------------------------------- flags + environment


def flags(environ: Mapping[str, str] | None = None, raise_errors: bool = False) -> Flags:
    """Every `dynmig device-plugin` flag; each also reads DYNMIG_<NAME> (base/flags.py). The names the
    plugin read before (HAMi's style, e.g. METRICS_ADDRESS) still work, with a warning."""
    f = Flags(
        "dynmig device-plugin",
        "dynmig's MIG device plugin: creates the GPU instance a pod's "
        "reservation names when its container starts, destroys it when the pod ends.",
        environ,
        raise_errors=raise_errors,
    )
    f.add(
        "--node-name",
        default="",
        quiet_env=("NODE_NAME",),
        show_default="$NODE_NAME",
        help="this node (required; the chart sets NODE_NAME from spec.nodeName)",
    )
    f.add(
        "--config-file",
        default=DEFAULT_DEVICE_CONFIG,
        old_env=("DEVICE_CONFIG_FILE",),
        help="device config YAML with nvidia.migProfileAllowlist",
    )
    f.add(
        "--node-config",
        default=None,
        old_env=("NODE_CONFIG_FILE",),
        show_default="none: MIG mode, no filter",
        help="node config JSON (nodeconfig[] by node name)",
    )
    f.add(
        "--kubelet-dir",
        default=DEFAULT_KUBELET_DIR,
        old_env=("KUBELET_DEVICE_PLUGIN_DIR",),
        help="kubelet's device-plugin directory (kubelet.sock and our socket)",
    )
    f.add(
        "--socket-name",
        default=DEFAULT_SOCKET,
        old_env=("DEVICE_PLUGIN_SOCKET",),
        help="file name of our gRPC socket in --kubelet-dir",
    )
    f.add(
        "--device-list-strategy",
        default="envvar",
        choices=STRATEGIES,
        old_env=("DEVICE_LIST_STRATEGY",),
        help="how a container is told its MIG device: envvar (NVIDIA_VISIBLE_DEVICES); cdi (a CDI "
        "spec per instance, written by the plugin: GPU Operator 25.10+ and other CDI nodes); "
        "cdi-cri or cdi-annotations (nvidia.com/gpu names, resolved by a spec someone else writes)",
    )
    f.add(
        "--cdi-dir",
        default="/var/run/cdi",
        help="where --device-list-strategy=cdi writes a CDI spec per MIG instance (the runtime's spec dir)",
    )
    f.add(
        "--driver-root",
        default="/",
        help="the NVIDIA driver's root on the host (/run/nvidia/driver for GPU Operator's driver "
        "container): the CDI specs' device nodes are under its dev/",
    )
    f.add(
        "--mig-minors",
        default=str(MIG_MINORS),
        help="the driver's MIG capability table (device minors of /dev/nvidia-caps/nvidia-cap<N>)",
    )
    f.add(
        "--reconcile-interval",
        default=5.0,
        type=positive_seconds,
        old_env=("RECONCILE_INTERVAL",),
        help="seconds between reconcile passes (reclaim, adopt, publish); e.g. 5, 30s, 1m",
    )
    f.add(
        "--metrics-address",
        default="",
        old_env=("METRICS_ADDRESS",),
        show_default="off",
        help="host:port for /metrics, /healthz and /readyz (e.g. :9394)",
    )
    f.add(
        "--kubeconfig",
        default=None,
        quiet_env=("KUBECONFIG",),
        show_default="in-cluster",
        help="kubeconfig file (also read from KUBECONFIG)",
    )
    f.add(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        help="node-local directory of the ownership journal (a hostPath that survives the pod)",
    )
    f.add(
        "--idle-ttl",
        default=0.0,
        type=seconds_or_zero,
        show_default="0: off",
        help="keep an ended pod's MIG instance this long for a pod whose reservation matches it "
        "exactly (no create in its Allocate); e.g. 60, 2m; 0 destroys it at once",
    )
    f.add(
        "--idle-per-gpu",
        default=2,
        type=idle_cap,
        help="at most this many idle instances per GPU (1 to 8)",
    )
    f.add(
        "--idle-scope",
        default="namespace",
        choices=IDLE_SCOPES,
        help="who may get an idle instance: a pod of the same namespace as its last user, or any "
        "pod (see docs/startup.md: GPU memory clearing between users is not proven here)",
    )
    f.add(
        "--precreate",
        default="on",
        choices=("on", "off"),
        help="create a bound pod's reserved MIG instances as soon as it is bound to this node, "
        "in parallel across GPUs; Allocate then waits only for what is left (docs/startup.md)",
    )
    f.add(
        "--pod-resources-socket",
        default="",
        show_default="none: HAMi's node lock only",
        help="kubelet's PodResources socket (e.g. /var/lib/kubelet/pod-resources/kubelet.sock; a "
        "relative path is taken from --kubelet-dir): "
        "Allocate finds its pod from the pods kubelet has taken in, so the scheduler need not hold "
        "the node lock (the node then says so in dynmig.io/plugin-claims)",
    )
    f.add(
        "--warm-pool",
        default=WarmSize(),
        type=warm_size,
        show_default="0: off",
        help="keep up to this many idle MIG instances on this node, of the profiles its pods asked "
        f"most in --warm-window, where the scheduler sees free slices (0 to {MAX_WARM_POOL}), or "
        "exactly these per profile, e.g. 1g.5gb=56 (sized for a known burst); needs --idle-ttl; a "
        "node's warmPool in the node config overrides it; docs/startup.md",
    )
    f.add(
        "--warm-window",
        default=600.0,
        type=warm_window,
        help="how far back the warm pool counts this node's Allocates per profile; e.g. 10m, 1h "
        "(1 minute to 1 day)",
    )
    f.add("--log-level", default="info", choices=LEVELS, help="least severe log level written")
    f.add(
        "--log-format",
        default="text",
        choices=FORMATS,
        help="text: one readable line per event; json: one JSON object per line",
    )
    return f


def seconds_or_zero(text: str) -> float:
    """A duration as `positive_seconds` reads it, or 0 (off)."""
    if text.strip() in ("0", "0s", "0m", "0h"):
        return 0.0
    value = positive_seconds(text)
    if value > 7 * 24 * 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than a week; use e.g. 60, 5m, 1h")
    return value


def idle_cap(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if not 1 <= value <= 8:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to 8")
    return value


def warm_size(text: str) -> WarmSize:
    """`--warm-pool`: a number (split by demand) or PROFILE=COUNT pairs, e.g. 1g.5gb=56,2g.10gb=4."""
    text = text.strip()
    try:
        if "=" not in text:  # the node config's rules for a number, the same message
            return warm_pool_value(int(text) if text.isdigit() and len(text) <= 4 else text)
        pairs = text.split(",")
        if len(pairs) > MAX_WARM_PROFILES:
            raise ValueError(f"names {len(pairs)} profiles; at most {MAX_WARM_PROFILES}")
        items: list[tuple[object, object]] = []
        for pair in pairs:
            profile, _, count = (x.strip() for x in pair.partition("="))
            items.append((profile, int(count) if count.isdigit() and len(count) <= 4 else count))
        return _warm_counts(items)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def warm_window(text: str) -> float:
    value = positive_seconds(text)
    if not 60 <= value <= 24 * 3600:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not from 1 minute to 1 day; e.g. 10m, 1h")
    return value


def load_config(argv: list[str]) -> PluginConfig:
    """Parse flags (env as defaults) and the files they name; raise ConfigError on any bad field."""
    f = flags(raise_errors=True)
    try:
        args = f.parse(argv)
    except FlagError as error:
        raise ConfigError(str(error)) from None
    if not args.node_name:
        raise ConfigError("--node-name / NODE_NAME: required (the name of the node this plugin runs on)")
    if "/" in args.socket_name or not args.socket_name.endswith(".sock"):
        raise ConfigError(f"--socket-name: {args.socket_name!r} must be a file name ending in .sock")
    if not args.state_dir or not Path(args.state_dir).is_absolute() or len(args.state_dir) > 1024:
        raise ConfigError(
            f"--state-dir / DYNMIG_STATE_DIR: {args.state_dir!r} must be an absolute directory path "
            f"(default {DEFAULT_STATE_DIR})"
        )
    try:
        device_config = load_device_config(args.config_file)
    except PolicyError as error:
        raise ConfigError(str(error)) from None
    node = load_node_config(args.node_config, args.node_name)
    warm: WarmSize = args.warm_pool if node.warm_pool is None else node.warm_pool
    where = "--warm-pool / DYNMIG_WARM_POOL" if node.warm_pool is None else "node config warmPool"
    if warm.size and not args.idle_ttl:
        raise ConfigError(
            f"{where}: {warm.size} warm instances need idle reuse on (--idle-ttl / DYNMIG_IDLE_TTL above "
            "0): a warm instance is handed to a pod as an idle one"
        )
    unknown = sorted(p for p, _ in warm.profiles if p not in device_config.allowlist.all_profiles())
    if unknown:
        raise ConfigError(
            f"{where}: {', '.join(unknown)} not in the device config's migProfileAllowlist "
            f"({', '.join(sorted(device_config.allowlist.all_profiles())) or 'empty'}): never created"
        )
    return PluginConfig(
        node_name=args.node_name,
        device_config=device_config,
        node=node,
        kubelet_dir=Path(args.kubelet_dir),
        socket_name=args.socket_name,
        strategy=args.device_list_strategy,
        cdi_dir=Path(args.cdi_dir),
        driver_root=Path(args.driver_root),
        mig_minors=Path(args.mig_minors),
        reconcile_interval=args.reconcile_interval,
        metrics_address=args.metrics_address,
        kubeconfig=args.kubeconfig,
        state_dir=Path(args.state_dir),
        log_level=args.log_level,
        log_format=args.log_format,
        idle_ttl=args.idle_ttl,
        idle_per_gpu=args.idle_per_gpu,
        idle_scope=args.idle_scope,
        precreate=args.precreate == "on",
        pod_resources_socket=args.pod_resources_socket,
        warm_pool=warm.size,
        warm_profiles=warm.profiles,
        warm_window=args.warm_window,
        warnings=tuple(f.warnings),
    )
