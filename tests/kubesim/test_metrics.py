"""metrics.k8s.io/v1beta1: what ``kubectl top node`` and ``kubectl top pod`` read."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubesim.builders import create_job, vcjob

METRICS = ("metrics.k8s.io", "v1beta1")


def test_discovery_lists_the_metrics_group(api):
    groups = client.ApisApi(api).get_api_versions().groups
    assert "metrics.k8s.io" in {g.name for g in groups}
    resources = client.CustomObjectsApi(api).api_client.call_api(
        "GET",
        f"{api.configuration.host}/apis/metrics.k8s.io/v1beta1",
        header_params={"Authorization": api.configuration.auth_settings()["BearerToken"]["value"]},
    )
    assert b'"NodeMetrics"' in resources.read()


def test_node_usage_is_system_daemons_plus_running_pods(sim, custom):
    idle = custom.get_cluster_custom_object(*METRICS, "nodes", "a100-0")
    # system daemons (250m) and the GPU Operator's two pods (no requests: 8m each)
    assert idle["usage"]["cpu"] == f"{(250 + 8 + 8) * 1_000_000}n"
    job = vcjob("train", namespace="team-b", queue="team-b")
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "2", "memory": "4Gi"},
        "limits": {"nvidia.com/gpu": 1},
    }
    create_job(custom, job)
    sim.settle()
    sim.advance(3)
    busy = custom.get_cluster_custom_object(*METRICS, "nodes", "a100-0")
    assert busy["usage"]["cpu"] == f"{(266 + 1600) * 1_000_000}n"  # 80% of the 2-core request
    pods = custom.list_namespaced_custom_object(*METRICS, "team-b", "pods")["items"]
    assert [p["metadata"]["name"] for p in pods] == ["train-worker-0"]
    assert pods[0]["containers"][0]["usage"]["cpu"] == "1600000000n"
    nodes = custom.list_cluster_custom_object(*METRICS, "nodes")["items"]
    assert len(nodes) == 3


def test_pending_pods_have_no_metrics(sim, custom):
    create_job(
        custom,
        vcjob("nowhere", namespace="team-b", queue="team-b", node_selector={"gpu-type": "h100"}),
    )
    sim.settle()
    assert custom.list_namespaced_custom_object(*METRICS, "team-b", "pods")["items"] == []
    with pytest.raises(ApiException) as err:
        custom.get_namespaced_custom_object(*METRICS, "team-b", "pods", "nowhere-worker-0")
    assert err.value.status == 404
