"""/openapi/v2 and /openapi/v3: what kubectl reads to validate, apply and explain."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kubesim.conftest import raw

GROUP_VERSIONS = {
    "api/v1",
    "apis/batch.volcano.sh/v1alpha1",
    "apis/bus.volcano.sh/v1alpha1",
    "apis/networking.k8s.io/v1",
    "apis/scheduling.volcano.sh/v1beta1",
}


def refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {value["$ref"]} if isinstance(value.get("$ref"), str) else set()
        for child in value.values():
            found |= refs(child)
        return found
    if isinstance(value, list):
        return set().union(*(refs(v) for v in value)) if value else set()
    return set()


def test_v3_index_names_every_served_group_version_with_a_hash(sim):
    status, _, index = raw(sim, "GET", "/openapi/v3")
    assert status == 200
    assert set(index["paths"]) == GROUP_VERSIONS
    url = index["paths"]["apis/batch.volcano.sh/v1alpha1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/batch.volcano.sh/v1alpha1?hash=")


@pytest.mark.parametrize("gv", sorted(GROUP_VERSIONS))
def test_every_v3_reference_resolves(sim, gv):
    status, _, doc = raw(sim, "GET", f"/openapi/v3/{gv}")
    assert status == 200 and doc["openapi"] == "3.0.0"
    schemas = doc["components"]["schemas"]
    for ref in refs(doc):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


def test_volcano_job_patch_takes_field_validation_so_kubectl_validates_server_side(sim):
    _, _, doc = raw(sim, "GET", "/openapi/v3/apis/batch.volcano.sh/v1alpha1")
    patch = doc["paths"]["/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs/{name}"][
        "patch"
    ]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "batch.volcano.sh",
        "version": "v1alpha1",
        "kind": "Job",
    }
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    # kubectl apply sends a strategic merge patch only where the PATCH lists it
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    _, _, core = raw(sim, "GET", "/openapi/v3/api/v1")
    cm_patch = core["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]
    assert "application/strategic-merge-patch+json" in cm_patch["requestBody"]["content"]
    job = doc["components"]["schemas"]["sh.volcano.batch.v1alpha1.Job"]
    assert job["x-kubernetes-group-version-kind"][0]["kind"] == "Job"
    # the real CRD schema: tasks[].template is a PodTemplateSpec with minAvailable beside it
    assert "minAvailable" in job["properties"]["spec"]["properties"]
    assert "tasks" in job["properties"]["spec"]["properties"]


def test_core_schemas_are_kubernetes_own(sim):
    _, _, doc = raw(sim, "GET", "/openapi/v3/api/v1")
    schemas = doc["components"]["schemas"]
    pod = schemas["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Pod", "version": "v1"}]
    containers = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert "io.k8s.api.core.v1.ConfigMap" in schemas


def test_v2_is_served_as_json_and_refuses_protobuf(sim):
    status, _, doc = raw(sim, "GET", "/openapi/v2", headers={"Accept": "application/json"})
    assert status == 200 and doc["swagger"] == "2.0"
    for ref in refs(doc):
        assert ref.removeprefix("#/definitions/") in doc["definitions"], ref
    assert "sh.volcano.scheduling.v1beta1.Queue" in doc["definitions"]
    status, _, _ = raw(
        sim,
        "GET",
        "/openapi/v2",
        headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
    )
    assert status == 406


def test_openapi_needs_a_token(sim):
    status, _, _ = raw(sim, "GET", "/openapi/v3", token=None)
    assert status == 401
