"""kube.rest: JSON requests on the official client's transport reach the API server as the client's
own calls do (TLS from the kubeconfig, the identity's bearer token) and fail as the same KubeErrors."""

from __future__ import annotations

import pytest
from sim.apiserver import ApiServer

from kube.errors import Conflict, Forbidden, NotFound
from kube.rest import AUTH_REUSE, JsonRequests, segment


@pytest.fixture
def https_apiserver(tmp_path):
    server = ApiServer(workdir=tmp_path / "apiserver", https=True).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_request_over_tls_carries_the_identitys_token_and_returns_the_answer(https_apiserver):
    calls = JsonRequests(https_apiserver.api_client("scheduler"))
    https_apiserver.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    patch = {"metadata": {"annotations": {"hami.io/mutex.lock": "2026-01-01T00:00:00Z,team,p1"}}}
    calls.request("lock n1", "PATCH", "/api/v1/nodes/n1", patch, "application/merge-patch+json", decode=False)
    node = calls.request("read n1", "GET", "/api/v1/nodes/n1")
    assert node["metadata"]["annotations"]["hami.io/mutex.lock"] == "2026-01-01T00:00:00Z,team,p1"
    stored = https_apiserver.get("nodes", "n1")
    assert stored["metadata"]["annotations"] == node["metadata"]["annotations"]


def test_a_request_without_a_known_token_is_refused_as_forbidden(https_apiserver):
    api = https_apiserver.api_client("scheduler")
    api.configuration.api_key["BearerToken"] = "Bearer not-a-token"
    api.configuration.refresh_api_key_hook = None
    with pytest.raises(Forbidden, match="read n1"):
        JsonRequests(api).request("read n1", "GET", "/api/v1/nodes/n1")


def test_a_token_changed_in_the_client_is_sent_once_the_reuse_window_has_passed(https_apiserver):
    api = https_apiserver.api_client("scheduler")
    api.configuration.refresh_api_key_hook = None
    now = [0.0]
    calls = JsonRequests(api, clock=lambda: now[0])
    https_apiserver.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    calls.request("read n1", "GET", "/api/v1/nodes/n1")
    api.configuration.api_key["BearerToken"] = "Bearer not-a-token"
    now[0] += AUTH_REUSE + 0.1
    with pytest.raises(Forbidden, match="read n1"):
        calls.request("read n1", "GET", "/api/v1/nodes/n1")


def test_after_a_refused_token_the_next_request_asks_the_client_for_its_credentials_again(https_apiserver):
    api = https_apiserver.api_client("scheduler")
    api.configuration.refresh_api_key_hook = None
    good = api.configuration.api_key["BearerToken"]
    api.configuration.api_key["BearerToken"] = "Bearer not-a-token"
    calls = JsonRequests(api, clock=lambda: 0.0)  # the clock stands still: only the 401 ends the reuse
    https_apiserver.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    with pytest.raises(Forbidden):
        calls.request("read n1", "GET", "/api/v1/nodes/n1")
    api.configuration.api_key["BearerToken"] = good
    assert calls.request("read n1", "GET", "/api/v1/nodes/n1")["metadata"]["name"] == "n1"


def test_a_missing_object_is_not_found_and_a_stale_write_a_conflict_naming_the_call(apiserver):
    calls = JsonRequests(apiserver.api_client("admin"))
    with pytest.raises(NotFound, match="read ghost") as raised:
        calls.request("read ghost", "GET", "/api/v1/nodes/ghost")
    assert "ghost" in str(raised.value)  # the server's Status message is kept
    apiserver.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    stale = {"metadata": {"resourceVersion": "1", "annotations": {"a": "b"}}}
    with pytest.raises(Conflict, match="patch n1"):
        calls.request("patch n1", "PATCH", "/api/v1/nodes/n1", stale, "application/merge-patch+json")


def test_a_name_is_one_path_segment_whatever_it_contains():
    assert segment("a/b?c#d") == "a%2Fb%3Fc%23d"
    assert segment("node-1.example") == "node-1.example"


def test_a_request_after_the_client_closed_its_connection_pools_is_sent_on_a_new_pool(apiserver):
    api = apiserver.api_client("admin")
    calls = JsonRequests(api)
    apiserver.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    assert calls.request("read n1", "GET", "/api/v1/nodes/n1")["metadata"]["name"] == "n1"
    api.rest_client.pool_manager.clear()  # closes every pool it made, the one the calls keep included
    patch = {"metadata": {"annotations": {"a": "b"}}}
    calls.request(
        "patch n1", "PATCH", "/api/v1/nodes/n1", patch, "application/merge-patch+json", decode=False
    )
    assert apiserver.get("nodes", "n1")["metadata"]["annotations"] == {"a": "b"}
