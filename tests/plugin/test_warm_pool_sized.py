"""A warm pool sized by the operator for a known burst (`--warm-pool 1g.5gb=56`, a node's
`warmPool: {"1g.5gb": 56}`): made from the start, before this node has served any pod, kept at its
size, never beyond its bound or the per-GPU idle cap, handed to pods of any namespace with no
create, never while a process runs on it; hostile values are refused naming the field."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from mig.idle import IDLE, decode_idle
from mig.placement import GpuState, PublishedProfile
from mig.types import Placement
from plugin.config import ConfigError, load_config, parse_node_config
from plugin.idle import is_warm
from plugin.warm import first_per_gpu
from tests.plugin.conftest import Want

TWO_A100 = {"gpus": [{"model": "A100-SXM4-40GB"}, {"model": "A100-SXM4-40GB"}]}
ONE_A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}


def sized(counts: dict[str, int], per_gpu: int = 7) -> dict[str, object]:
    return {
        "idle_ttl": 300.0,
        "idle_per_gpu": per_gpu,
        "warm_pool": sum(counts.values()),
        "warm_profiles": tuple(counts.items()),
    }


def warm_instances(app):
    return [m for m in app.manager.managed() if is_warm(m)]


def creates(node) -> int:
    return sum(1 for e in node.sim.events() if e["op"] == "create_gi")


def ticks(node, n: int) -> None:
    for _ in range(n):
        node.tick()


def test_a_pool_given_by_profile_is_made_before_any_pod_and_kept_at_its_size(make_node):
    node = make_node(TWO_A100)
    app = node.start_plugin(**sized({"1g.5gb": 8, "2g.10gb": 1}))
    ticks(node, 10)  # at most one create per GPU per tick

    pool = warm_instances(app)
    assert sorted(m.key.profile for m in pool) == ["1g.5gb"] * 8 + ["2g.10gb"]
    assert all(m.idle for m in pool)
    published = decode_idle(node.node_annotations().get(IDLE))
    assert len(published) == 9  # the scheduler sees every one of them as idle
    made = creates(node)
    ticks(node, 3)
    assert creates(node) == made and len(warm_instances(app)) == 9  # kept, nothing more made


def test_the_pool_fills_several_gpus_in_one_tick_but_never_two_creates_on_one_gpu(make_node):
    node = make_node(TWO_A100)
    app = node.start_plugin(**sized({"1g.5gb": 14}))
    node.tick()
    first = warm_instances(app)
    assert sorted(m.key.gpu_uuid for m in first) == sorted(node.uuids)  # both GPUs, one each
    ticks(node, 7)
    assert len(warm_instances(app)) == 14
    assert [len(node.instances(g)) for g in (0, 1)] == [7, 7]


def test_the_pool_never_goes_beyond_the_per_gpu_idle_cap(make_node):
    node = make_node(ONE_A100)
    app = node.start_plugin(**sized({"1g.5gb": 7}, per_gpu=3))
    ticks(node, 6)
    assert len(warm_instances(app)) == 3
    assert len(node.instances(0)) == 3


def test_pods_of_any_namespace_get_warm_instances_with_no_create(make_node):
    node = make_node(ONE_A100)
    core = k8s.CoreV1Api(node.apiserver.api_client("admin"))
    for ns in ("team-a", "team-b"):
        core.create_namespace({"metadata": {"name": ns}})
    app = node.start_plugin(**sized({"1g.5gb": 2}))
    ticks(node, 3)
    pool = sorted(warm_instances(app), key=lambda m: m.key.start)
    assert len(pool) == 2
    before = creates(node)

    for (name, ns), warm in zip((("a", "team-a"), ("b", "team-b")), pool, strict=True):
        node.add_pod(name, [[Want(0, "1g.5gb", warm.key.start, 1)]], namespace=ns)
        assert node.admit(name, ns).ok
        assert node.reservations(name, ns)[0].migUUID == warm.mig_uuid
    assert creates(node) == before  # both handed over, nothing created
    assert warm_instances(app) == []


def test_a_warm_instance_a_process_runs_on_is_never_handed_out(make_node):
    node = make_node(ONE_A100)
    app = node.start_plugin(**sized({"1g.5gb": 1}))
    node.tick()
    [warm] = warm_instances(app)
    node.sim.set_busy(node.uuids[0], pids=(4711,), gi_id=warm.gi_id, ci_id=warm.ci_id)

    node.add_pod("b", [[Want(0, "1g.5gb", warm.key.start, 1)]])
    result = node.admit("b")
    assert not result.ok
    assert node.reservations("b")[0].migUUID is None
    assert any(gi[1] == warm.key.start for gi in node.instances(0))  # not destroyed either


def test_a_pool_larger_than_the_node_stops_where_the_scheduler_sees_no_free_slice(make_node):
    node = make_node(ONE_A100)
    app = node.start_plugin(**sized({"1g.5gb": 6, "3g.20gb": 2}))
    ticks(node, 10)
    pool = warm_instances(app)
    slices = sum(m.key.size for m in pool)
    assert slices <= 7 and len(pool) <= 8
    assert not any(a.key.placement.overlaps(b.key.placement) for a in pool for b in pool if a is not b)


# ---- the pure part


def test_the_first_placement_per_gpu_follows_the_engines_order():
    one_g = PublishedProfile("1g.5gb", 4864, 14, 1, tuple(Placement(i, 1) for i in range(7)))
    gpus = [GpuState("n", f"GPU-{i}", "A100-SXM4-40GB", (one_g,), index=i) for i in range(3)]
    # ten 1g: the engine packs seven onto one GPU, then three onto the next; the third GPU gets none
    chosen = first_per_gpu(gpus, ["1g.5gb"] * 10, {g.uuid: 7 for g in gpus})
    assert len(chosen) == 2 and len({uuid for uuid, _, _ in chosen}) == 2
    assert first_per_gpu(gpus, ["1g.5gb"] * 10, {}) == []  # no GPU has room under the cap
    assert first_per_gpu(gpus, ["7g.40gb"], {g.uuid: 7 for g in gpus}) == []  # not offered here


# ---- configuration


def load(device_config, *args: str):
    return load_config(["--node-name", "n1", "--config-file", str(device_config), "--idle-ttl", "5m", *args])


@pytest.fixture
def device_config(tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text(
        "nvidia:\n  migProfileAllowlist:\n    - models: [A100-SXM4-40GB]\n      profiles: [1g.5gb, 2g.10gb]\n"
    )
    return path


def test_the_flag_gives_the_pool_by_profile(device_config):
    base = ["--node-name", "n1", "--config-file", str(device_config), "--idle-ttl", "5m"]
    config = load_config([*base, "--warm-pool", "1g.5gb=56"])
    assert config.warm_pool == 56 and config.warm_profiles == (("1g.5gb", 56),)
    config = load_config([*base, "--warm-pool", "1g.5gb=4,2g.10gb=2"])
    assert config.warm_pool == 6 and config.warm_profiles == (("1g.5gb", 4), ("2g.10gb", 2))
    assert load_config([*base, "--warm-pool", "8"]).warm_profiles == ()  # by demand, as before


@pytest.mark.parametrize(
    "value",
    [
        "1g.5gb=x",
        "1g.5gb=65",
        "1g.5gb=-1",
        "1g.5gb=40,2g.10gb=40",  # 80 in all
        "rm -rf=1",
        "1g.5gb=1,1g.5gb=2",
        ",".join(f"{i}g.{i}gb=1" for i in range(1, 9)) * 3,  # too many profiles
        "=3",
    ],
)
def test_a_bad_pool_by_profile_on_the_flag_is_named(device_config, value):
    with pytest.raises(ConfigError) as error:
        load(device_config, "--warm-pool", value)
    assert "--warm-pool" in str(error.value)


def test_a_profile_the_allowlist_does_not_offer_is_refused(device_config):
    with pytest.raises(ConfigError) as error:
        load(device_config, "--warm-pool", "3g.20gb=2")
    assert "--warm-pool" in str(error.value) and "3g.20gb" in str(error.value)


def test_a_nodes_pool_by_profile_overrides_the_flag(device_config, tmp_path):
    node_config = tmp_path / "config.json"
    node_config.write_text(
        '{"nodeconfig": [{"name": "n1", "operatingmode": "mig", "warmPool": {"1g.5gb": 56}}]}'
    )
    args = ["--node-name", "n1", "--config-file", str(device_config), "--node-config", str(node_config)]
    config = load_config([*args, "--idle-ttl", "5m", "--warm-pool", "8"])
    assert config.warm_pool == 56 and config.warm_profiles == (("1g.5gb", 56),)
    with pytest.raises(ConfigError) as error:
        load_config(args)  # without idle reuse
    assert "warmPool" in str(error.value)


@pytest.mark.parametrize(
    "value",
    [
        {"1g.5gb": -1},
        {"1g.5gb": True},
        {"1g.5gb": 65},
        {"1g.5gb": 1.5},
        {"1g.5gb": "7"},
        {"1g.5gb": 40, "2g.10gb": 40},
        {"../../etc": 1},
        {"": 1},
        {"x" * 10_000: 1},
        {f"1g.{i}gb": 1 for i in range(17)},
        {"1g.5gb": [1]},
    ],
)
def test_a_bad_pool_by_profile_in_the_node_config_is_named(value):
    doc = {"nodeconfig": [{"name": "n1", "operatingmode": "mig", "warmPool": value}]}
    with pytest.raises(ConfigError) as error:
        parse_node_config(doc, "n1", "config.json")
    message = str(error.value)
    assert "nodeconfig[0].warmPool" in message and len(message) < 300


def test_zero_counts_turn_a_profile_off():
    doc = {"nodeconfig": [{"name": "n1", "warmPool": {"1g.5gb": 0, "2g.10gb": 2}}]}
    warm = parse_node_config(doc, "n1", "config.json").warm_pool
    assert warm is not None and warm.size == 2 and warm.profiles == (("2g.10gb", 2),)
