"""Services, Ingresses and pod readiness, as an inference job's endpoint needs them."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubesim.builders import create_job, vcjob
from tests.kubesim.conftest import raw


def _service(name: str = "web", port: int = 8000, **spec: object) -> dict:
    body = {
        "selector": {"volcano.sh/job-name": "infer"},
        "ports": [{"name": "http", "port": port, "targetPort": "http"}],
        **spec,
    }
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": body}


def _ingress(name: str = "web", host: str = "infer.serve.example.org", **path: object) -> dict:
    entry = {
        "path": "/",
        "pathType": "Prefix",
        "backend": {"service": {"name": "web", "port": {"name": "http"}}},
        **path,
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name},
        "spec": {"rules": [{"host": host, "http": {"paths": [entry]}}]},
    }


def test_a_service_is_stored_with_the_defaults_and_a_cluster_ip(core):
    made = core.create_namespaced_service("team-a", _service())
    assert made.spec.type == "ClusterIP"
    assert made.spec.cluster_ip.startswith("10.96.")
    assert made.spec.ports[0].protocol == "TCP"
    assert made.spec.ports[0].target_port == "http"
    assert core.read_namespaced_service("web", "team-a").spec.cluster_ip == made.spec.cluster_ip
    with pytest.raises(ApiException) as again:
        core.create_namespaced_service("team-a", _service())
    assert again.value.status == 409
    core.delete_namespaced_service("web", "team-a")
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_service("web", "team-a")
    assert gone.value.status == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_service(port=70000), "spec.ports[0].port"),
        (_service(port=0), "spec.ports[0].port"),
        (_service(ports=[]), "spec.ports"),
        (_service(name="9lives"), "metadata.name"),
        (_service(type="Magic"), "spec.type"),
        (
            _service(
                ports=[{"name": "http", "port": 80, "targetPort": "much-too-long-a-port-name"}]
            ),
            "spec.ports[0].targetPort",
        ),
    ],
    ids=[
        "port above 65535",
        "port zero",
        "no ports",
        "name not a DNS-1035 label",
        "unknown type",
        "target port name too long",
    ],
)
def test_an_invalid_service_is_refused_naming_the_field(core, body, field):
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_service("team-a", body)
    assert refused.value.status == 422
    assert field in refused.value.body


def test_an_ingress_is_served_by_networking_v1(api):
    networking = client.NetworkingV1Api(api)
    made = networking.create_namespaced_ingress("team-a", _ingress())
    assert made.spec.rules[0].host == "infer.serve.example.org"
    listed = networking.list_namespaced_ingress("team-a").items
    assert [i.metadata.name for i in listed] == ["web"]
    networking.delete_namespaced_ingress("web", "team-a")
    assert networking.list_namespaced_ingress("team-a").items == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_ingress(host="Not_A_Host"), "spec.rules[0].host"),
        (_ingress(pathType="Sometimes"), "pathType"),
        (_ingress(path="relative"), "spec.rules[0].http.paths[0].path"),
        (
            _ingress(backend={"service": {"name": "web", "port": {"name": "http", "number": 80}}}),
            "service.port",
        ),
    ],
    ids=["bad host", "unknown path type", "relative path", "port by name and number"],
)
def test_an_invalid_ingress_is_refused_naming_the_field(api, body, field):
    with pytest.raises(ApiException) as refused:
        client.NetworkingV1Api(api).create_namespaced_ingress("team-a", body)
    assert refused.value.status == 422
    assert field in refused.value.body


def _probed_job(name: str) -> dict:
    manifest = vcjob(name, restart_policy="OnFailure", duration=600)
    container = manifest["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container["ports"] = [{"name": "http", "containerPort": 8000}]
    container["readinessProbe"] = {"httpGet": {"path": "/health", "port": "http"}}
    return manifest


def _ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_a_pod_with_a_readiness_probe_runs_unready_then_becomes_ready(sim, core, custom):
    create_job(custom, _probed_job("infer"))
    create_job(custom, vcjob("plain", duration=600))
    sim.advance(2.5)  # scheduled and started (podStartupSeconds 2), probe not yet passed
    probed = core.read_namespaced_pod("infer-worker-0", "team-a")
    plain = core.read_namespaced_pod("plain-worker-0", "team-a")
    assert probed.status.phase == "Running" and not _ready(probed)
    assert probed.status.container_statuses[0].ready is False
    assert _ready(plain)
    sim.advance(1.5)  # readinessSeconds (1) later
    probed = core.read_namespaced_pod("infer-worker-0", "team-a")
    assert _ready(probed)
    assert probed.status.container_statuses[0].ready is True


def test_deleting_the_job_collects_the_service_it_owns(sim, core, custom):
    job = create_job(custom, _probed_job("infer"))
    owned = _service("infer-serve")
    owned["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "name": "infer",
            "uid": job["metadata"]["uid"],
        }
    ]
    core.create_namespaced_service("team-a", owned)
    core.create_namespaced_service("team-a", _service("unowned"))
    sim.settle()
    custom.delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", "team-a", "jobs", "infer"
    )
    sim.settle()
    names = [s.metadata.name for s in core.list_namespaced_service("team-a").items]
    assert names == ["unowned"]


# ---------------------------------------------------------------------------------------------
# The service proxy: services/{name}:{port}/proxy/{path}, answered by the simulated server
# ---------------------------------------------------------------------------------------------
def _serving(sim, core, custom) -> None:
    create_job(custom, _probed_job("infer"))
    core.create_namespaced_service("team-a", _service("infer-serve"))
    sim.advance(2.5)  # running, not yet Ready


def test_the_service_proxy_answers_once_a_pod_is_ready(sim, core, custom):
    _serving(sim, core, custom)
    status, _headers, body = raw(
        sim, "GET", "/api/v1/namespaces/team-a/services/infer-serve:8000/proxy/v1/models"
    )
    assert status == 503
    assert body["reason"] == "ServiceUnavailable"
    assert body["message"] == 'no endpoints available for service "infer-serve"'

    sim.advance(1.5)  # readinessSeconds later: the pod is an endpoint
    # the official client's own call, "name:port" percent-encoded as it sends it
    models = core.connect_get_namespaced_service_proxy_with_path(
        "infer-serve:8000", "team-a", "v1/models", _preload_content=False
    )
    assert json.loads(models.data)["data"][0] == {
        "id": "trainer",  # the image's name
        "object": "model",
        "owned_by": "kubesim",
    }
    health = core.connect_get_namespaced_service_proxy_with_path(
        "infer-serve:http", "team-a", "health", _preload_content=False
    )
    assert json.loads(health.data) == {"status": "ok"}
    status, headers, answer = raw(
        sim,
        "POST",
        "/api/v1/namespaces/team-a/services/infer-serve/proxy/v1/chat/completions",
        {"messages": [{"role": "user", "content": "ping"}]},
    )
    assert status == 200 and answer["choices"][0]["message"]["content"] == "echo: ping"
    assert headers["x-kubesim-pod"] == "infer-worker-0"
    status, _headers, missing = raw(
        sim, "GET", "/api/v1/namespaces/team-a/services/infer-serve:8000/proxy/nothing/here"
    )
    assert (status, missing) == (404, {"detail": "Not Found"})


def test_the_service_proxy_refuses_as_an_api_server_does(sim, core, custom):
    _serving(sim, core, custom)
    sim.advance(1.5)
    status, _h, body = raw(sim, "GET", "/api/v1/namespaces/team-a/services/nope:80/proxy/")
    assert (status, body["reason"]) == (404, "NotFound")
    status, _h, body = raw(sim, "GET", "/api/v1/namespaces/team-a/services/infer-serve:9/proxy/")
    assert status == 503 and 'no service port "9"' in body["message"]
    # RBAC: services/proxy is authorized per HTTP method (POST is "create")
    status, _h, body = raw(
        sim,
        "POST",
        "/api/v1/namespaces/team-a/services/infer-serve:8000/proxy/v1/completions",
        {"prompt": "x"},
        token="viewer-token",
    )
    assert status == 403 and "services/proxy" in body["message"]
