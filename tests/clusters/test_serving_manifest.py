"""The serving objects of an inference job: the readiness probe in its Volcano Job, its Service
and Ingress, validated against the real schemas (the Volcano CRD for the Job, the Kubernetes
OpenAPI schemas through kubernetes-validate for the core and networking objects)."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest

from rules import jobspec, volcano
from rules.volcano import (
    ManifestError,
    ServingSpec,
    build_serving_ingress,
    build_serving_service,
    build_volcano_job,
    ingress_host,
    ingress_host_pattern_check,
    readiness_path_check,
    serving_service_name,
    serving_url,
)
from tests.clusters.test_volcano_manifest import JOB_ID, a_spec, assert_valid_job, containers_of

SCHEMA_VERSION = kubernetes_validate.latest_version()


def a_serving(**overrides: object) -> ServingSpec:
    fields: dict[str, object] = {
        "job_id": JOB_ID,
        "team_slug": "vision",
        "namespace": "gp-vision",
        "port": 8000,
        "owner_uid": "3d4c1f0a-5a8e-4bbf-9c1e-2f0d7a6b5c4e",
    }
    fields.update(overrides)
    return ServingSpec(**fields)  # type: ignore[arg-type]


def test_an_inference_container_gets_an_http_readiness_probe_on_its_named_port():
    job = build_volcano_job(a_spec(kind="inference", port=8000, readiness_path="/health"))
    assert_valid_job(job)
    (container,) = containers_of(job)
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    probe = container["readinessProbe"]
    assert probe["httpGet"] == {"path": "/health", "port": "http"}
    assert probe["periodSeconds"] == volcano.READINESS_PERIOD_SECONDS
    assert "initialDelaySeconds" not in probe  # a slow model is not ready yet, not failing


def test_without_a_path_the_probe_is_a_tcp_connect():
    job = build_volcano_job(a_spec(kind="inference", port=8000))
    assert_valid_job(job)
    (container,) = containers_of(job)
    assert container["readinessProbe"]["tcpSocket"] == {"port": "http"}
    assert "httpGet" not in container["readinessProbe"]


def test_training_and_portless_inference_get_no_probe():
    for spec in (a_spec(kind="training", port=9000), a_spec(kind="inference")):
        (container,) = containers_of(build_volcano_job(spec))
        assert "readinessProbe" not in container


@pytest.mark.parametrize(
    "bad", ["health", "/with space", "/frag#ment", "/" + "x" * 1024, "/ünï"], ids=repr
)
def test_a_readiness_path_the_kubelet_cannot_send_is_refused_by_both_rules(bad):
    with pytest.raises(ManifestError, match="readiness_path"):
        readiness_path_check(bad)
    with pytest.raises(ManifestError, match="readiness_path"):
        a_spec(kind="inference", port=8000, readiness_path=bad)
    # Submit applies the same rule (the job request's, on the ground floor).
    assert jobspec.readiness_path_refusal(bad) is not None


def test_the_service_selects_the_jobs_pods_on_the_named_port_and_is_owned_by_the_job():
    service = build_serving_service(a_serving())
    kubernetes_validate.validate(service, SCHEMA_VERSION, strict=True)
    job_name = volcano.volcano_job_name(JOB_ID)
    assert service["metadata"]["name"] == serving_service_name(JOB_ID) == f"{job_name}-serve"
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", service["metadata"]["name"])  # DNS-1035
    assert service["spec"]["selector"] == {
        "volcano.sh/job-name": job_name,
        "gpupool.dev/job-id": JOB_ID,
    }
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}
    ]
    (owner,) = service["metadata"]["ownerReferences"]
    assert owner["kind"] == "Job" and owner["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert owner["name"] == job_name and owner["uid"] == a_serving().owner_uid
    assert owner["controller"] is False  # Volcano's svc plugin controls its own Service


def test_the_selector_matches_the_labels_the_pods_carry():
    job = build_volcano_job(a_spec(kind="inference", port=8000))
    pod_labels = {
        **job["spec"]["tasks"][0]["template"]["metadata"]["labels"],
        "volcano.sh/job-name": job["metadata"]["name"],  # what Volcano's controller adds
    }
    selector = build_serving_service(a_serving())["spec"]["selector"]
    assert selector.items() <= pod_labels.items()


def test_an_ingress_routes_the_jobs_host_to_its_service():
    host = ingress_host("{job}.{team}.serve.example.org", JOB_ID, "vision")
    spec = a_serving(host=host, ingress_class_name="nginx")
    ingress = build_serving_ingress(spec)
    kubernetes_validate.validate(ingress, SCHEMA_VERSION, strict=True)
    assert host == f"{volcano.volcano_job_name(JOB_ID)}.vision.serve.example.org"
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == host
    (path,) = rule["http"]["paths"]
    assert path["pathType"] == "Prefix" and path["path"] == "/"
    assert path["backend"]["service"] == {"name": spec.name, "port": {"name": "http"}}
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert serving_url(spec) == f"https://{host}"


def test_the_clusterip_url_is_the_services_dns_name_and_port():
    assert serving_url(a_serving()) == (
        f"http://{serving_service_name(JOB_ID)}.gp-vision.svc.cluster.local:8000"
    )


def test_without_an_owner_uid_there_is_no_owner_reference():
    assert "ownerReferences" not in build_serving_service(a_serving(owner_uid=None))["metadata"]


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("serve.example.org", "must contain {job}"),
        ("{job}.{cluster}.example.org", "not {cluster}"),
        ("{job}.Serve.example.org", "lower-case DNS name"),
        ("{job}_x.example.org", "lower-case DNS name"),
        ("{job}" + "x" * 40 + ".example.org", "lower-case DNS name"),
    ],
    ids=["no job", "unknown placeholder", "upper case", "underscore", "label too long"],
)
def test_a_host_pattern_that_cannot_give_every_job_a_host_is_refused(pattern, words):
    with pytest.raises(ManifestError, match=re.escape(words)):
        ingress_host_pattern_check(pattern)


def test_a_team_slug_that_is_no_dns_label_still_gives_a_valid_host():
    host = ingress_host("{team}-{job}.serve.example.org", JOB_ID, "Vision_Lab")
    ingress = build_serving_ingress(a_serving(host=host))
    kubernetes_validate.validate(ingress, SCHEMA_VERSION, strict=True)


@pytest.mark.parametrize("port", [0, 65536])
def test_a_port_out_of_range_is_refused(port):
    with pytest.raises(ManifestError, match="port"):
        a_serving(port=port)
