"""A profile HAMi's allowlist names by slice key (`7g.79gb` on an A100-SXM4-80GB, whose driver says
`7g.80gb`): published, reserved, created and adopted under the allowlist's name, as HAMi does."""

from __future__ import annotations

from pathlib import Path

from base.policyfiles import load_device_config
from mig.annotations import LEFTOVERS, NODE_REGISTER, decode_node_register
from tests.plugin.conftest import Want

HAMI_CHART_DEFAULT = Path(__file__).parents[1] / "fixtures" / "hami-v2.10-chart-device-config.yaml"
A100_80 = {"gpus": [{"model": "A100-SXM4-80GB"}]}


def test_the_node_publishes_hamis_7g_79gb_with_the_7_slice_profiles_facts(make_node):
    node = make_node(A100_80)
    node.start_plugin(device_config=load_device_config(HAMI_CHART_DEFAULT))

    [gpu] = decode_node_register(node.node_annotations()[NODE_REGISTER])
    published = {p.name: p for p in gpu.migProfiles}
    assert list(published) == ["1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb"]
    seven = published["7g.79gb"]
    assert (seven.sliceCount, [(p.start, p.size) for p in seven.placements]) == (7, [(0, 8)])
    assert seven.memoryMB > 80_000


def test_a_hami_written_7g_79gb_reservation_is_realized_at_its_placement_and_adopted_after_a_restart(
    make_node,
):
    node = make_node(A100_80)
    config = load_device_config(HAMI_CHART_DEFAULT)
    node.start_plugin(device_config=config)
    node.add_pod("whole", [[Want(0, "7g.79gb", 0, 8)]])

    result = node.admit("whole")

    assert result.ok, result.error
    [(profile, start, size, mig_uuid)] = node.instances(0)
    assert (profile, start, size) == ("7g.80gb", 0, 8)  # what the driver calls it
    [reservation] = node.reservations("whole")
    assert (reservation.profile, reservation.migUUID) == ("7g.79gb", mig_uuid)

    node.set_phase("whole", "Running")
    node.sim.set_busy(
        node.uuids[0], pids=(4242,), gi_id=reservation.gpuInstanceID, ci_id=reservation.computeInstanceID
    )
    node.stop_plugin()
    app = node.start_plugin(device_config=config)
    node.tick()

    [adopted] = app.manager.managed()
    assert (adopted.key.profile, adopted.mig_uuid) == ("7g.79gb", mig_uuid)
    assert app.report.unproven == []
    assert node.destroys() == []
    assert LEFTOVERS not in node.node_annotations()  # its instance is not mistaken for someone else's
