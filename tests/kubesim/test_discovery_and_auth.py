"""The server speaks the wire protocol: discovery, TLS with the generated CA, tokens, RBAC."""

from __future__ import annotations

import json
import ssl
import stat
import urllib.error
import urllib.request

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubesim import KubeSim
from tests.kubesim.builders import create_job, vcjob
from tests.kubesim.conftest import TINY, make_client, raw


def test_version_is_served_over_https_verified_with_the_generated_ca(api):
    info = client.VersionApi(api).get_code()
    assert info.git_version.startswith("v1.")
    assert info.major == "1"


def test_a_client_without_the_ca_refuses_the_certificate(sim):
    with pytest.raises(urllib.error.URLError) as excinfo:
        urllib.request.urlopen(sim.url + "/version", timeout=5)
    assert isinstance(excinfo.value.reason, ssl.SSLCertVerificationError)


def test_written_kubeconfig_loads_with_load_kube_config(sim, tmp_path):
    path = sim.write_kubeconfig(tmp_path / "kube" / "config.yaml")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    configuration = client.Configuration()
    config.load_kube_config(str(path), client_configuration=configuration)
    with client.ApiClient(configuration) as api:
        nodes = client.CoreV1Api(api).list_node()
    assert len(nodes.items) == 3


def test_discovery_lists_core_and_volcano_groups(api):
    assert client.CoreApi(api).get_api_versions().versions == ["v1"]
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert groups["batch.volcano.sh"].preferred_version.version == "v1alpha1"
    assert groups["scheduling.volcano.sh"].preferred_version.version == "v1beta1"
    assert groups["bus.volcano.sh"].preferred_version.version == "v1alpha1"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/v1", {"nodes", "namespaces", "pods", "pods/log", "events"}),
        ("/apis/batch.volcano.sh/v1alpha1", {"jobs", "jobs/status"}),
        ("/apis/scheduling.volcano.sh/v1beta1", {"queues", "queues/status", "podgroups"}),
        ("/apis/bus.volcano.sh/v1alpha1", {"commands"}),
    ],
    ids=["core v1", "volcano batch", "volcano scheduling", "volcano bus"],
)
def test_group_version_documents_list_resources_and_verbs(sim, path, expected):
    status, _, body = raw(sim, "GET", path)
    assert status == 200
    assert body["kind"] == "APIResourceList"
    names = {r["name"] for r in body["resources"]}
    assert expected <= names
    jobs = next((r for r in body["resources"] if r["name"] == "jobs"), None)
    if jobs:
        assert jobs["namespaced"] is True
        assert {"create", "get", "list", "watch", "delete"} <= set(jobs["verbs"])
        assert jobs["shortNames"] == ["vcjob", "vj"]


def test_missing_token_is_401_with_a_status_body(sim):
    status, _, body = raw(sim, "GET", "/api/v1/nodes", token=None)
    assert status == 401
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }


def test_wrong_token_is_401_through_the_client(sim):
    api = make_client(sim, token="not-a-real-token")
    with pytest.raises(ApiException) as excinfo:
        client.CoreV1Api(api).list_node()
    assert excinfo.value.status == 401
    api.close()


def test_version_and_health_are_open_to_anonymous_callers(sim):
    assert raw(sim, "GET", "/version", token=None)[0] == 200
    assert raw(sim, "GET", "/healthz", token=None)[2] == "ok"


def test_view_role_may_list_but_not_create(sim):
    api = make_client(sim, token="viewer-token")
    custom = client.CustomObjectsApi(api)
    assert custom.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "team-a", "jobs")
    with pytest.raises(ApiException) as excinfo:
        create_job(custom, vcjob("train-1"))
    assert excinfo.value.status == 403
    assert (
        'cannot create resource "jobs" in API group "batch.volcano.sh" in the namespace '
        '"team-a"' in json.loads(excinfo.value.body)["message"]
    )
    api.close()


def _certificate_client(sim, certificate, tmp_path):
    """The official client with a client certificate (its configuration takes file paths)."""
    cert_pem, key_pem = certificate
    (tmp_path / "client.crt").write_bytes(cert_pem)
    (tmp_path / "client.key").write_bytes(key_pem)
    (tmp_path / "ca.crt").write_bytes(sim.ca_pem)
    configuration = client.Configuration()
    configuration.host = sim.url
    configuration.ssl_ca_cert = str(tmp_path / "ca.crt")
    configuration.cert_file = str(tmp_path / "client.crt")
    configuration.key_file = str(tmp_path / "client.key")
    return client.ApiClient(configuration)


def test_a_client_certificate_authenticates_its_common_name(sim, tmp_path):
    with _certificate_client(sim, sim.client_certificate("ci-bot", role="view"), tmp_path) as api:
        assert len(client.CoreV1Api(api).list_node().items) == 3
        with pytest.raises(ApiException) as excinfo:
            create_job(client.CustomObjectsApi(api), vcjob("x"))
    assert excinfo.value.status == 403
    assert 'User "ci-bot" cannot create' in json.loads(excinfo.value.body)["message"]


def test_a_certificate_user_granted_nothing_is_forbidden_not_anonymous(sim, tmp_path):
    nobody = sim.client_certificate("nobody", role=None)
    with _certificate_client(sim, nobody, tmp_path) as api, pytest.raises(ApiException) as excinfo:
        client.CoreV1Api(api).list_node()
    assert excinfo.value.status == 403


def test_a_client_certificate_of_another_ca_fails_the_handshake(sim, tmp_path):
    with KubeSim(TINY, clock_speed=0) as other:
        foreign = other.client_certificate("ci-bot")
    # urllib3 wraps the TLS alert in its own errors
    with _certificate_client(sim, foreign, tmp_path) as api, pytest.raises(Exception) as excinfo:
        client.CoreV1Api(api).list_node(_request_timeout=5)
    assert "SSL" in repr(excinfo.value) or "ssl" in repr(excinfo.value)


def test_namespaced_rules_limit_the_scope(sim):
    token = sim.add_token(
        role={
            "user": "bob",
            "rules": [{"verbs": ["list"], "resources": ["pods"], "namespaces": ["team-a"]}],
        }
    )
    core = client.CoreV1Api(make_client(sim, token=token))
    assert core.list_namespaced_pod("team-a").items == []
    for call in (lambda: core.list_namespaced_pod("team-b"), core.list_pod_for_all_namespaces):
        with pytest.raises(ApiException) as excinfo:
            call()
        assert excinfo.value.status == 403
    status, _, body = raw(sim, "GET", "/api/v1/pods", token=token)
    assert status == 403
    assert body["message"] == (
        'pods is forbidden: User "bob" cannot list resource "pods" in API group "" at the '
        "cluster scope"
    )


def test_subresources_are_authorized_separately(sim):
    token = sim.add_token(role=[{"verbs": ["get"], "resources": ["pods"]}])
    status, _, body = raw(sim, "GET", "/api/v1/namespaces/team-a/pods/x/log", token=token)
    assert status == 403
    assert 'cannot get resource "pods/log"' in body["message"]


def test_unknown_paths_are_404_and_unsupported_verbs_405(sim):
    assert raw(sim, "GET", "/apis/apps/v1/deployments")[0] == 404
    status, _, body = raw(sim, "POST", "/api/v1/nodes", {"kind": "Node"})
    assert (status, body["reason"]) == (405, "MethodNotAllowed")
    status, _, _ = raw(
        sim, "POST", "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups", {}
    )
    assert status == 405


def test_plain_http_only_when_asked():
    with KubeSim(TINY, tls=False, clock_speed=0) as sim:
        assert sim.url.startswith("http://")
        assert sim.ca_pem is None
        api = make_client(sim)
        assert len(client.CoreV1Api(api).list_node().items) == 3
        api.close()


def test_connections_are_kept_alive_between_requests(sim):
    import http.client

    context = ssl.create_default_context(cadata=sim.ca_pem.decode())
    conn = http.client.HTTPSConnection(sim.host, sim.port, context=context, timeout=5)
    for _ in range(3):
        conn.request("GET", "/version")
        response = conn.getresponse()
        assert response.status == 200
        response.read()
        assert response.getheader("Connection") != "close"
    sock = conn.sock
    conn.request("GET", "/version")
    conn.getresponse().read()
    assert conn.sock is sock  # the same TCP/TLS connection served all requests
    conn.close()
