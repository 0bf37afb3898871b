"""A lab node in DRA mode: kubelet's DRA side (plugin watcher, DRA manager, CDI dir) and the
`dynmig dra-plugin` process the chart's `dynmig-dra-plugin` DaemonSet pod runs there.

Why a module of its own: a DRA node differs from an extender node only in its node plugin, and
everything that difference needs (where kubelet looks for the plugin, where the plugin writes, how
the lab knows it registered) lives here; `lab.cluster` asks it for the pieces.

Paths are kubelet's layout under the node's short socket dir (unix socket paths must stay under
108 bytes): `plugins_registry/` (kubelet's plugin watcher, where the plugin puts
`<driver>-reg.sock`) and `plugins/<driver>/` (its `dra.sock`), as the chart's `registryPath` and
`pluginsPath/<driver>` mount them; the CDI specs and the plugin's journal go under the node's
workdir, as the chart's `cdiRoot` and `/var/lib/dynmig-dra` hostPaths outlive the pod.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.kubelet import DraManager, PluginWatcher
from sim.nvml import caps

from lab import chart
from lab.supervisor import Child, Supervisor, python_argv

DAEMONSET = f"{chart.RELEASE}-dra-plugin"
CONTAINER = "dra-plugin"
PLUGIN_TYPE = "DRAPlugin"  # kubelet's pluginregistration type for DRA drivers


READY_FALLBACK = "dra-plugin: serving"  # the contract's text, should plugin.dra.main not name it


def ready_text() -> str:
    """The line `dynmig dra-plugin` logs once its registration and DRA sockets are up
    (plugin.dra.main.READY_TEXT)."""
    try:
        from plugin.dra.main import READY_TEXT
    except ImportError:
        return READY_FALLBACK
    return str(READY_TEXT)


@dataclass
class DraSide:
    """kubelet's DRA half on one node and the plugin process now running for its DaemonSet pod."""

    registry_dir: Path
    plugin_dir: Path
    cdi_dir: Path
    state_dir: Path
    manager: DraManager
    watcher: PluginWatcher
    process: Child | None = None
    starts: int = 0

    def stop(self) -> None:
        self.watcher.stop()
        self.manager.close()

    def registrations(self, driver: str) -> int:
        """How often kubelet registered the driver's plugin (each new registration socket once)."""
        return sum(1 for r in list(self.watcher.log) if r.name == driver and r.error is None)


def start_side(sockets: Path, workdir: Path, api_client: Any) -> DraSide:
    """kubelet's DRA manager (its claim cache checkpointed in the node's workdir, as kubelet's
    dra_manager_state) and plugin watcher over the node's plugins_registry."""
    workdir.mkdir(parents=True, exist_ok=True)
    cdi_dir = workdir / "cdi"
    cdi_dir.mkdir(exist_ok=True)
    manager = DraManager(api_client, state_file=workdir / "dra_manager_state")
    registry = sockets / "plugins_registry"
    watcher = PluginWatcher(registry, {PLUGIN_TYPE: manager}).start()
    return DraSide(registry, sockets / "plugins", cdi_dir, workdir / "dra-plugin-state", manager, watcher)


def driver_name(rendered: chart.Rendered) -> str:
    """The chart's `--driver-name` (draPlugin.driverName): the plugin's name at registration."""
    for arg in rendered.container_args("DaemonSet", CONTAINER):
        if arg.startswith("--driver-name="):
            return arg.split("=", 1)[1]
    return "mig.dynmig.io"  # the plugin's own default


def plugin_argv(
    rendered: chart.Rendered,
    side: DraSide,
    node: str,
    state_file: Path,
    config_file: Path,
    node_config: Path,
    kubeconfig: Path,
    metrics_port: int,
) -> list[str]:
    """The chart's args with the paths a laptop has instead (chart.laptop_args, as the device plugin
    gets them), under the simulated NVML of the node's state file."""
    driver = driver_name(rendered)
    chart_args = rendered.container_args("DaemonSet", CONTAINER)
    # the device plugin's node config, where the chart mounts it for this plugin too
    asks = any(arg.startswith("--node-config=") for arg in chart_args)
    args = chart.laptop_args(
        chart_args,
        replace={
            **({"--node-config": str(node_config)} if asks else {}),
            "--config-file": str(config_file),
            "--registry-dir": str(side.registry_dir),
            "--plugin-dir": str(side.plugin_dir / driver),
            "--cdi-dir": str(side.cdi_dir),
            # the simulated driver's /proc/driver/nvidia-caps/mig-minors (it lists more GPUs than a node has)
            "--mig-minors": str(caps.write_mig_minors(state_file.parent / "proc" / "mig-minors", 16)),
            "--state-dir": str(side.state_dir),
            # the node's per-GPU lock files, in the lab's workdir rather than the host's /var/lib
            "--gpu-lock-dir": str(side.state_dir.parent / "gpu-locks"),
            "--metrics-address": f"127.0.0.1:{metrics_port}",
        },
        add={"--node-name": node, "--kubeconfig": str(kubeconfig)},
    )
    return python_argv("-m", "sim.nvml.launch", "--state", str(state_file), "--", *args)


def spawn(supervisor: Supervisor, node: str, argv: list[str], env: dict[str, str], tee: Path | None) -> Child:
    return supervisor.start(f"dra-plugin-{node}", argv, env=env, ready_text=ready_text(), wait=False, tee=tee)


def wait_registered(
    side: DraSide, driver: str, supervisor: Supervisor, started_after: int, registrations: int, timeout: float
) -> None:
    """Block until a plugin process started after `started_after` starts logged READY_TEXT and
    kubelet's plugin watcher registered the driver for the `registrations`-th time (a restarted
    plugin's new socket is a new registration); TimeoutError says which step did not happen."""
    deadline = time.monotonic() + timeout
    while side.starts <= started_after:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no dra-plugin process started within {timeout:.0f}s")
        time.sleep(0.05)
    assert side.process is not None, "a started DRA plugin is recorded before starts grows"
    supervisor.wait_ready(side.process, max(1.0, deadline - time.monotonic()))
    while side.registrations(driver) < registrations:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the dra-plugin logged {ready_text()!r} but kubelet has not registered {driver} "
                f"within {timeout:.0f}s (plugin watcher: {side.watcher.log[-3:]})"
            )
        time.sleep(0.05)
