"""The Helm chart, rendered with `helm template`, as the lab's source of configuration.

Why: the lab must run what a cluster runs. The webhook configurations, the KubeSchedulerConfiguration
and the device config come from the chart; only what cannot be the same on a laptop is rewritten
(the extender's host:port and the path of its CA file), and `laptop_scheduler_config` says so.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from base import resources

ROOT = Path(__file__).resolve().parents[2]
CHART = resources.data_path("charts", "dynmig")  # the Helm chart, as shipped in the wheel
NAMESPACE = "dynmig"
RELEASE = "dynmig"


def component_selector(component: str) -> str:
    """The label selector of the chart's pods of one component (device-plugin, scheduler)."""
    return f"app.kubernetes.io/name=dynmig,app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"


class ChartError(RuntimeError):
    pass


def helm_binary() -> str:
    """helm from $DYNMIG_TOOLS, the project's .cache/tools (what `make tools` fills) or PATH."""
    tools = os.environ.get("DYNMIG_TOOLS", str(ROOT / ".cache" / "tools"))
    found = shutil.which("helm", path=f"{tools}{os.pathsep}{os.environ.get('PATH', '')}")
    if not found:
        raise ChartError(
            f"helm not found in {tools} or PATH: run `make tools` (the lab renders charts/dynmig with it)"
        )
    return found


@dataclass(frozen=True)
class Rendered:
    objects: tuple[dict[str, Any], ...]

    def find(self, kind: str, name: str | None = None) -> dict[str, Any]:
        for obj in self.objects:
            if obj.get("kind") == kind and (name is None or obj["metadata"]["name"] == name):
                return obj
        raise ChartError(f"the rendered chart has no {kind}{' ' + name if name else ''}")

    @property
    def scheduler_config(self) -> dict[str, Any]:
        data = self.find("ConfigMap", f"{RELEASE}-scheduler-config")["data"]
        config = yaml.safe_load(data["config.yaml"])
        if not isinstance(config, dict):
            raise ChartError(f"{RELEASE}-scheduler-config: config.yaml is not a YAML mapping")
        return config

    @property
    def device_config_text(self) -> str:
        return str(self.find("ConfigMap", f"{RELEASE}-device-config")["data"]["device-config.yaml"])

    @property
    def webhook_configurations(self) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(o)
            for o in self.objects
            if o.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        ]

    @property
    def node_config_text(self) -> str:
        return str(self.find("ConfigMap", f"{RELEASE}-node-config")["data"]["config.json"])

    def _pod(self, kind: str, container: str) -> tuple[dict[str, Any], dict[str, Any]]:
        for obj in self.objects:
            if obj.get("kind") == kind:
                for c in obj["spec"]["template"]["spec"]["containers"]:
                    if c["name"] == container:
                        return obj["spec"]["template"]["spec"], c
        raise ChartError(f"the rendered chart has no {kind} container {container!r}")

    def container_args(self, kind: str, container: str) -> list[str]:
        """The args of a container of the chart's Deployment or DaemonSet (e.g. `serve ...`)."""
        return list(self._pod(kind, container)[1].get("args") or [])

    def container_env(self, kind: str, container: str) -> dict[str, str]:
        """The container's environment with literal values (those from the downward API, such as
        POD_NAME, are left out: the lab passes their flags itself)."""
        return {
            e["name"]: str(e["value"]) for e in self._pod(kind, container)[1].get("env") or [] if "value" in e
        }

    def secret_files(self, kind: str, container: str) -> dict[str, tuple[str, str]]:
        """Files the container sees from Secret volumes: path in the container -> (Secret, key)."""
        spec, c = self._pod(kind, container)
        volumes = {v["name"]: v["secret"] for v in spec.get("volumes") or [] if "secret" in v}
        files: dict[str, tuple[str, str]] = {}
        for mount in c.get("volumeMounts") or []:
            secret = volumes.get(mount["name"])
            if secret is None:
                continue
            for item in secret.get("items") or []:
                files[f"{mount['mountPath'].rstrip('/')}/{item['path']}"] = (
                    secret["secretName"],
                    item["key"],
                )
        return files

    @property
    def service(self) -> tuple[str, str]:
        svc = self.find("Service", RELEASE)
        return svc["metadata"]["namespace"], svc["metadata"]["name"]


def render(
    policy: Path | None = None,
    mig_nodes: tuple[str, ...] = (),
    values: tuple[str, ...] = (),
    json_values: tuple[str, ...] = (),
) -> Rendered:
    """`helm template` the chart; `policy` (a device-config file) goes in as deviceConfig.content and
    each of `mig_nodes` gets `operatingmode: mig` in devicePlugin.nodeConfig, as on a real install;
    `values` are `--set` arguments (`server.page.enabled=true`), `json_values` `--set-json` ones
    (`allocationWriters=[...]`)."""
    argv = [helm_binary(), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in values:
        argv += ["--set", value]
    for value in json_values:
        argv += ["--set-json", value]
    if mig_nodes:
        entries = [{"name": n, "operatingmode": "mig"} for n in mig_nodes]
        argv += ["--set-json", f"devicePlugin.nodeConfig={json.dumps(entries)}"]
    if policy is not None:
        argv += ["--set-file", f"deviceConfig.content={policy}"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except OSError as error:
        raise ChartError(f"could not run helm: {error}") from None
    if done.returncode != 0:
        raise ChartError(f"helm template {CHART} failed:\n{done.stderr.strip()}")
    objects = tuple(o for o in yaml.safe_load_all(done.stdout) if isinstance(o, dict))
    return Rendered(objects)


def laptop_scheduler_config(
    doc: dict[str, Any], extender_host: str, extender_port: int, ca_file: Path
) -> dict[str, Any]:
    """The chart's KubeSchedulerConfiguration with the two laptop differences: the extender is at
    host:port of the `dynmig serve` child (not 127.0.0.1:8443 in the pod), and its CA file is where
    the lab wrote the Secret key the chart mounts there (not /etc/dynmig/ca/ca.crt). Leader election
    is off: one scheduler, no Lease to wait for."""
    doc = copy.deepcopy(doc)
    doc.setdefault("leaderElection", {})["leaderElect"] = False
    for ext in doc.get("extenders") or []:
        parts = urlsplit(ext["urlPrefix"])
        ext["urlPrefix"] = urlunsplit(parts._replace(netloc=f"{extender_host}:{extender_port}"))
        if (ext.get("tlsConfig") or {}).get("caFile"):
            ext["tlsConfig"]["caFile"] = str(ca_file)
    return doc


def laptop_args(args: list[str], replace: dict[str, str], add: dict[str, str] | None = None) -> list[str]:
    """A container's args with the values of some `--flag=value` replaced (paths and ports that differ
    on a laptop) and flags a pod gets from its environment added; every other flag stays the chart's."""
    out: list[str] = []
    for arg in args:
        flag = arg.split("=", 1)[0]
        out.append(f"{flag}={replace[flag]}" if flag in replace else arg)
    present = {a.split("=", 1)[0] for a in out}
    missing = {**{f: v for f, v in replace.items() if f not in present}, **(add or {})}
    return out + [f"{flag}={value}" for flag, value in missing.items()]
