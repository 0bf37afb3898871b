"""The warm pool: idle instances of the profiles this node's pods asked for most, created before a
pod asks, only where the scheduler sees free slices, journaled and published like idle ones; a pod
reserving one gets it with no create (from any namespace: nobody used it before), a reservation
overlapping one destroys it first, and the pool trims what it no longer wants."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from mig.idle import IDLE, decode_idle
from mig.placement import GpuState, PublishedProfile
from mig.types import Placement
from plugin.config import ConfigError, load_config, parse_node_config
from plugin.idle import WARM_UID, is_warm
from plugin.warm import Demand, goal, next_placement
from tests.plugin.conftest import Want

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}
WARM = {"idle_ttl": 300.0, "idle_per_gpu": 2, "warm_pool": 1}
ONE_G = Want(0, "1g.5gb", 0, 1)


def creates(node) -> int:
    return sum(1 for e in node.sim.events() if e["op"] == "create_gi")


def warm_instances(app):
    return [m for m in app.manager.managed() if is_warm(m)]


def served_one_pod(node, name: str = "a", want: Want = ONE_G) -> None:
    """A pod of this node was allocated (the pool's demand) and still runs."""
    node.add_pod(name, [[want]])
    assert node.admit(name).ok
    node.set_phase(name, "Running")


def test_a_warm_instance_of_the_asked_profile_is_made_where_nothing_is_and_published_idle(make_node):
    node = make_node(A100)
    app = node.start_plugin(**WARM)
    served_one_pod(node)
    node.tick()

    [warm] = warm_instances(app)
    assert warm.idle and warm.key.profile == "1g.5gb"
    assert not warm.key.placement.overlaps(Placement(0, 1))  # never over a reservation
    published = decode_idle(node.node_annotations().get(IDLE))
    assert [(x.profile, x.placement.start) for x in published] == [("1g.5gb", warm.key.start)]
    entry = next(e for e in app.journal.entries() if e.podUID == WARM_UID)
    assert entry.idleSince is not None  # journaled as idle, like every idle instance
    assert app.metrics.value("dynmig_plugin_warm_instances") == 1
    assert app.metrics.value("dynmig_plugin_warm_creates_total") == 1
    node.tick()
    assert len(warm_instances(app)) == 1  # the pool holds its size


def test_a_pod_of_another_namespace_reserving_it_gets_it_without_a_create(make_node):
    node = make_node(A100)
    k8s.CoreV1Api(node.apiserver.api_client("admin")).create_namespace({"metadata": {"name": "other"}})
    app = node.start_plugin(**WARM)
    served_one_pod(node)
    node.tick()
    [warm] = warm_instances(app)
    before = creates(node)

    want = Want(0, warm.key.profile, warm.key.start, warm.key.size)
    node.add_pod("b", [[want]], namespace="other")
    assert node.admit("b", "other").ok
    assert creates(node) == before
    assert node.reservations("b", "other")[0].migUUID == warm.mig_uuid
    assert warm_instances(app) == []
    [owned] = [m for m in app.manager.managed() if m.owner and m.owner.name == "b"]
    assert not owned.idle


def test_a_reservation_overlapping_a_warm_instance_destroys_it_first(make_node):
    node = make_node(A100)
    app = node.start_plugin(**WARM)
    served_one_pod(node, want=Want(0, "1g.5gb", 6, 1))
    node.tick()
    [warm] = warm_instances(app)

    start = warm.key.start // 2 * 2  # the 2g.10gb placement over it (0, 2 or 4: never over slice 6)
    node.add_pod("big", [[Want(0, "2g.10gb", start, 2)]])
    assert node.admit("big").ok
    assert warm_instances(app) == []
    assert app.metrics.value("dynmig_plugin_instance_destroys_total", cause="idle-evicted") == 1


def test_nothing_is_made_warm_while_a_pod_of_the_node_is_being_allocated(make_node):
    node = make_node(A100)
    app = node.start_plugin(**WARM)
    served_one_pod(node)
    node.add_pod("waiting", [[Want(0, "1g.5gb", 6, 1)]])  # bound, not admitted yet
    node.tick()
    assert warm_instances(app) == []


def test_without_demand_or_with_the_pool_off_nothing_is_made(make_node):
    node = make_node(A100)
    app = node.start_plugin(**WARM)
    node.tick()
    assert warm_instances(app) == []  # no Allocate yet: nobody asked for anything
    node.stop_plugin()
    app = node.start_plugin(idle_ttl=300.0)
    served_one_pod(node)
    node.tick()
    assert warm_instances(app) == []


def test_a_restart_with_the_pool_off_destroys_what_the_pool_made(make_node):
    node = make_node(A100)
    app = node.start_plugin(**WARM)
    served_one_pod(node)
    node.tick()
    [warm] = warm_instances(app)
    node.stop_plugin()

    app = node.start_plugin(idle_ttl=300.0)  # the pod still runs: startup leaves the GPU alone
    [again] = warm_instances(app)
    assert again.key == warm.key and again.idle  # claimed from the journal, still warm
    node.tick()
    assert warm_instances(app) == []
    assert [i[1] for i in node.instances(0)] == [0]  # only the pod's own instance is left
    assert all(e.podUID != WARM_UID for e in app.journal.entries())


def test_a_warm_instance_with_a_process_on_it_is_never_destroyed_by_the_pool(make_node):
    node = make_node(A100)
    app = node.start_plugin(**WARM)
    served_one_pod(node)
    node.tick()
    [warm] = warm_instances(app)
    node.sim.set_busy(node.uuids[0], pids=(4711,), gi_id=warm.gi_id, ci_id=warm.ci_id)
    app.warm.policy = type(app.warm.policy)(size=0)  # the pool no longer wants it
    node.tick()
    assert any(gi[1] == warm.key.start for gi in node.instances(0))  # still there


# ---- the pure parts


def test_the_pool_is_split_by_demand_most_asked_first():
    assert goal([("1g.5gb", 6), ("2g.10gb", 3), ("3g.20gb", 1)], 4) == {"1g.5gb": 3, "2g.10gb": 1}
    assert goal([("1g.5gb", 1), ("2g.10gb", 1)], 1) == {"1g.5gb": 1}
    assert goal([], 4) == {} and goal([("1g.5gb", 3)], 0) == {}


def test_demand_forgets_allocates_older_than_its_window():
    now = [0.0]
    demand = Demand(60.0, clock=lambda: now[0])
    demand.record(["1g.5gb", "1g.5gb"])
    now[0] = 30.0
    demand.record(["2g.10gb"])
    assert demand.ranked() == [("1g.5gb", 2), ("2g.10gb", 1)]
    now[0] = 70.0
    assert demand.ranked() == [("2g.10gb", 1)]


def test_the_next_placement_is_the_engines_and_never_on_a_full_gpu():
    one_g = PublishedProfile("1g.5gb", 4864, 14, 1, tuple(Placement(i, 1) for i in range(7)))
    gpus = [
        GpuState("n", "GPU-a", "A100-SXM4-40GB", (one_g,), occupied=(Placement(0, 1),), index=0),
        GpuState("n", "GPU-b", "A100-SXM4-40GB", (one_g,), index=1),
    ]
    found = next_placement(gpus, "1g.5gb")
    assert found is not None and found[0] == "GPU-a" and found[1] != Placement(0, 1)
    other = next_placement(gpus, "1g.5gb", full=["GPU-a"])
    assert other is not None and other[0] == "GPU-b"
    assert next_placement(gpus, "7g.40gb") is None


# ---- configuration


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text(
        "nvidia:\n  migProfileAllowlist:\n    - models: [A100-SXM4-40GB]\n      profiles: [1g.5gb]\n"
    )
    return path


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--warm-pool", "-1", "--idle-ttl", "5m"], "--warm-pool"),
        (["--warm-pool", "65", "--idle-ttl", "5m"], "--warm-pool"),
        (["--warm-pool", "two", "--idle-ttl", "5m"], "--warm-pool"),
        (["--warm-window", "10s"], "--warm-window"),
        (["--warm-window", "2d"], "--warm-window"),
        (["--warm-pool", "2"], "--warm-pool"),  # needs idle reuse
    ],
)
def test_a_bad_warm_pool_flag_is_named(policy, args, field):
    with pytest.raises(ConfigError) as error:
        load_config(["--node-name", "n1", "--config-file", str(policy), *args])
    assert field in str(error.value)


def test_the_warm_pool_flags_make_the_config(policy):
    config = load_config(
        ["--node-name", "n1", "--config-file", str(policy), "--idle-ttl", "5m", "--warm-pool", "4"]
    )
    assert config.warm_pool == 4 and config.warm_window == 600.0


@pytest.mark.parametrize("value", ["3", True, -1, 65, 2.5, [1], {"size": 1}])
def test_a_bad_warm_pool_in_the_node_config_is_named(value):
    doc = {"nodeconfig": [{"name": "n1", "operatingmode": "mig", "warmPool": value}]}
    with pytest.raises(ConfigError) as error:
        parse_node_config(doc, "n1", "config.json")
    assert "nodeconfig[0].warmPool" in str(error.value)


def test_a_nodes_warm_pool_overrides_the_flag(policy, tmp_path):
    node_config = tmp_path / "config.json"
    node_config.write_text('{"nodeconfig": [{"name": "n1", "operatingmode": "mig", "warmPool": 3}]}')
    args = ["--node-name", "n1", "--config-file", str(policy), "--node-config", str(node_config)]
    assert load_config([*args, "--idle-ttl", "5m", "--warm-pool", "8"]).warm_pool == 3
    with pytest.raises(ConfigError) as error:
        load_config(args)  # a warm pool without idle reuse
    assert "warmPool" in str(error.value)


def test_a_warm_create_posts_no_event_about_a_pod_that_does_not_exist(make_node):
    node = make_node(A100)
    app = node.start_plugin(**WARM)
    served_one_pod(node)
    node.tick()
    assert len(warm_instances(app)) == 1
    app.events.stop()  # flushes what was queued
    namespaces = {e.metadata.namespace for e in node.core.list_event_for_all_namespaces().items}
    assert namespaces <= {"default"}  # the served pod's events only: none about the warm pool's owner
    dropped = [
        s.value
        for m in app.metrics.registry.collect()
        if m.name == "dynmig_plugin_events_dropped"
        for s in m.samples
        if s.name.endswith("_total")
    ]
    assert sum(dropped) == 0  # nothing refused by the API server
