"""mig.dra.pending: pods waiting for MIG devices of the DRA driver, with kube-scheduler's reason."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mig.dra.pending import NO_CLAIM_YET, pending_claim_pods

DRIVER = "mig.dynmig.io"


def pod(name: str, claim: str | None, message: str | None = None, node: str = "") -> dict:
    status: dict = {"phase": "Pending"}
    if claim:
        status["resourceClaimStatuses"] = [{"name": "mig", "resourceClaimName": claim}]
    if message:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "message": message}]
    spec = {"resourceClaims": [{"name": "mig", "resourceClaimTemplateName": "one-7g"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"namespace": "ml", "name": name}, "spec": spec, "status": status}


def claim(name: str, expression: str, cls: str = "mig.dynmig.io") -> dict:
    request = {
        "name": "mig",
        "exactly": {"deviceClassName": cls, "selectors": [{"cel": {"expression": expression}}]},
    }
    return {"metadata": {"namespace": "ml", "name": name}, "spec": {"devices": {"requests": [request]}}}


SEVEN = f'device.attributes["{DRIVER}"].profile == "7g.40gb"'


def test_a_waiting_claim_pod_is_listed_with_what_it_asks_and_the_schedulers_reason():
    why = "0/2 nodes are available: 1 cannot allocate all claims, 1 node(s) didn't match Pod's node affinity/selector."
    (p,) = pending_claim_pods([pod("big", "big-mig-x", why)], [claim("big-mig-x", SEVEN)], DRIVER)
    assert (p.namespace, p.name, p.asks, p.reason) == ("ml", "big", "1 × 7g.40gb", why)


def test_a_pod_whose_claim_is_not_created_yet_says_so_and_other_drivers_pods_are_not_listed():
    (p,) = pending_claim_pods([pod("early", None)], [], DRIVER)
    assert p.reason == NO_CLAIM_YET
    other = claim("nic", 'device.attributes["sriov.example.com"].vf == 1', cls="vf.example.com")
    assert pending_claim_pods([pod("net", "nic")], [other], DRIVER) == []
    assert (
        pending_claim_pods([pod("bound", "big-mig-x", node="gpu-a")], [claim("big-mig-x", SEVEN)], DRIVER)
        == []
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.recursive(
            st.none() | st.text(max_size=5) | st.integers(),
            lambda c: st.lists(c) | st.dictionaries(st.text(max_size=5), c),
            max_leaves=20,
        ),
        max_size=5,
    )
)
def test_hostile_pods_and_claims_never_raise(junk):
    pending_claim_pods(junk, junk, DRIVER)
