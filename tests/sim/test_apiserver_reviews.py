"""kubectl auth can-i / whoami against the simulated API server, which authenticates but does not
enforce RBAC, and says so."""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
from urllib.parse import urlsplit

import pytest
from sim.apiserver import ApiServer
from sim.apiserver.reviews import REASON


@pytest.fixture
def tls_apiserver(tmp_path):
    # kubectl sends its bearer token over TLS only (over plain http it calls anonymously)
    server = ApiServer(workdir=tmp_path / "apiserver", https=True).start()
    yield server
    server.stop()


@pytest.fixture
def auth(tls_apiserver, kubectl, tmp_path):
    def kubectl_as(identity: str, *args: str) -> subprocess.CompletedProcess:
        config = str(tls_apiserver.kubeconfig(identity))
        return subprocess.run(
            [kubectl, "--kubeconfig", config, "--cache-dir", str(tmp_path / "cache"), "auth", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return kubectl_as


def post(server: ApiServer, identity: str, path: str, body: object) -> tuple[int, dict]:
    url = urlsplit(server.url)
    ctx = ssl.create_default_context(cadata=server.cert_pem.decode())
    ctx.check_hostname = False
    conn = http.client.HTTPSConnection(url.hostname, url.port, context=ctx, timeout=30)
    token = server.identity(identity).token
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn.request("POST", path, body=json.dumps(body), headers=headers)
    reply = conn.getresponse()
    return reply.status, json.loads(reply.read())


def test_whoami_names_the_user_the_token_belongs_to(auth):
    out = auth("scheduler", "whoami", "-o", "json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)["status"]["userInfo"]
    assert info["username"] == "system:serviceaccount:dynmig:dynmig-scheduler"
    assert "system:serviceaccounts:dynmig" in info["groups"]


def test_can_i_answers_yes_because_nothing_is_refused_and_the_reason_says_so(auth):
    out = auth("alice", "can-i", "delete", "nodes", "-v=8")
    assert (out.returncode, out.stdout.strip()) == (0, "yes")
    assert REASON in out.stderr  # the review's answer, as kubectl logged it


def test_can_i_list_shows_every_verb_on_everything(auth):
    out = auth("alice", "can-i", "--list", "-n", "team")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].split() == ["*.*", "[]", "[]", "[*]"]


def test_can_i_on_a_non_resource_url_answers_too(auth):
    out = auth("alice", "can-i", "get", "/metrics")
    assert (out.returncode, out.stdout.strip()) == (0, "yes")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"spec": {}}, "exactly one of nonResourceAttributes or resourceAttributes"),
        (
            {"spec": {"resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"path": "/x"}}},
            "exactly one of",
        ),
        ({"spec": "nope"}, "spec of a SelfSubjectAccessReview must be an object"),
        ([], "must be a JSON object"),
    ],
)
def test_a_malformed_access_review_is_refused_naming_the_field(tls_apiserver, body, says):
    status, doc = post(tls_apiserver, "alice", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body)
    assert status in (400, 422)
    assert says in doc["message"]


def test_a_subject_access_review_must_name_a_user_or_group(tls_apiserver):
    body = {"spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}}
    status, doc = post(tls_apiserver, "admin", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
    assert status == 422
    assert "spec.user" in doc["message"]
    body["spec"]["user"] = "alice"
    status, doc = post(tls_apiserver, "admin", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
    assert (status, doc["status"]["allowed"]) == (201, True)
