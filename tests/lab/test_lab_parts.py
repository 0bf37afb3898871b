"""The lab's own parts that need no running lab: command-line errors, the laptop rewrite of the
chart's scheduler config, and the texts a person reads (reasons, startup summary, tables)."""

from __future__ import annotations

import pytest
from lab import main
from lab.chart import ChartError, helm_binary, laptop_args, laptop_scheduler_config, render
from lab.report import gpu_reason, startup_summary, table
from sim.kubelet.pods import gpu_containers


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--nodes", "gpu=2xNOPE"], "--nodes: gpu:"),
        (["--nodes", "Bad_Name=1xA30"], "NAME is a lower-case DNS label"),
        (["--scenario", "nope"], "--scenario 'nope': unknown; one of: list, tour"),
        (["--policy", "/nonexistent/policy.yaml"], "--policy /nonexistent/policy.yaml: no such file"),
        (["--scenario", "mixed-1g-2g-3g", "--nodes", "solo=1xRTX-PRO-6000"], "needs a node with A100 GPUs"),
    ],
)
def test_a_bad_command_line_exits_2_naming_the_flag_and_starts_nothing(capsys, argv, says):
    assert main(argv) == 2
    assert says in capsys.readouterr().err


def test_scenario_list_names_the_tour_the_eight_guide_checks_dra_mode_and_the_hami_handover(capsys):
    assert main(["--scenario", "list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names[0] == "tour" and len(names) == 11 and names[-2:] == ["dra", "hami-handover"]


def test_the_laptop_scheduler_config_changes_only_the_extender_address_its_ca_file_and_leader_election():
    try:
        helm_binary()
    except ChartError as error:
        pytest.skip(str(error))
    chart = render().scheduler_config
    laptop = laptop_scheduler_config(chart, "127.0.0.1", 40123, "/tmp/lab/ca.crt")
    [ext] = laptop["extenders"]
    assert ext["urlPrefix"] == "https://127.0.0.1:40123"
    assert ext["tlsConfig"] == {"caFile": "/tmp/lab/ca.crt"}
    assert laptop["leaderElection"]["leaderElect"] is False
    for key in (
        "filterVerb",
        "bindVerb",
        "nodeCacheCapable",
        "managedResources",
        "enableHTTPS",
        "httpTimeout",
    ):
        assert ext[key] == chart["extenders"][0][key]
    assert laptop["profiles"] == chart["profiles"]
    assert chart["extenders"][0]["urlPrefix"] == "https://127.0.0.1:8444"  # the chart itself is not modified


def test_the_reason_for_one_gpu_is_picked_out_of_a_message_about_every_gpu():
    message = (
        "0/2 nodes are available: 1 GPU GPU-a: excluded by annotation: nvidia.com/use-gpuuuid does not "
        "list GPU-a, 1 GPU GPU-b: not enough free slices: free none, 1g.24gb needs 3 at one of 0:3; "
        "GPU GPU-c: excluded by annotation: nvidia.com/use-gpuuuid does not list GPU-c."
    )
    assert gpu_reason(message, "GPU-b") == "not enough free slices: free none, 1g.24gb needs 3 at one of 0:3"


def test_the_device_plugin_startup_line_is_counted_for_the_progress_output():
    line = (
        "INFO dynmig.plugin: startup: busy={'GPU-1': 'active reservation'} cleaned=['GPU-2', 'GPU-3'] "
        "adopted=5 protected=0 unproven=0 untouched=[]"
    )
    assert startup_summary(line) == (
        "startup: 1 busy GPU(s) left alone, 2 idle GPU(s) cleaned, 5 MIG instance(s) adopted"
    )


def test_kubelet_allocates_per_container_that_asks_for_the_resource_init_containers_first():
    pod = {
        "spec": {
            "initContainers": [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "containers": [
                {"name": "side"},
                {"name": "main", "resources": {"requests": {"nvidia.com/gpu": "2"}}},
            ],
        }
    }
    assert gpu_containers(pod, "nvidia.com/gpu") == [("warm", 1), ("main", 2)]


def test_tables_align_columns_under_their_headers():
    text = table(("POD", "PROFILE"), [("a", "1g.24gb"), ("long-name", "2g")])
    header, first, second = text.splitlines()
    assert header.index("PROFILE") == first.index("1g.24gb") == second.index("2g")


def test_a_charts_container_args_keep_every_flag_but_the_laptop_paths_and_ports():
    chart = [
        "serve",
        "--scheduler-name=dynmig-scheduler",
        "--port=8443",
        "--device-config=/etc/dynmig/device-config/device-config.yaml",
    ]
    args = laptop_args(
        chart,
        {"--port": "40123", "--device-config": "/tmp/lab/dc.yaml", "--metrics-port": "40124"},
        add={"--kubeconfig": "/tmp/lab/kc"},
    )
    assert args == [
        "serve",
        "--scheduler-name=dynmig-scheduler",
        "--port=40123",
        "--device-config=/tmp/lab/dc.yaml",
        "--metrics-port=40124",
        "--kubeconfig=/tmp/lab/kc",
    ]


def test_the_lab_takes_serves_secret_settings_and_kube_schedulers_ca_file_from_the_rendered_chart():
    try:
        helm_binary()
    except ChartError as error:
        pytest.skip(str(error))
    rendered = render()
    env = rendered.container_env("Deployment", "server")
    assert env["DYNMIG_CERT_MODE"] == "self" and env["DYNMIG_TLS_SECRET"]
    assert "POD_NAME" not in env  # from the downward API in a pod: the lab passes --identity itself
    assert rendered.secret_files("Deployment", "server") == {}  # serve reads the Secret through the API
    ca_file = rendered.scheduler_config["extenders"][0]["tlsConfig"]["caFile"]
    assert rendered.secret_files("Deployment", "kube-scheduler") == {
        ca_file: (env["DYNMIG_TLS_SECRET"], "ca.crt")
    }
