"""Fault injection for the portal's reliability tests: every injected fault is counted."""

from __future__ import annotations

import json
import socket
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubesim.builders import SCHED, create_job, vcjob
from tests.kubesim.conftest import make_client, raw


def test_500_for_the_next_n_creates_then_success(sim, custom):
    fault = sim.faults.add(verb="create", resource="jobs", status=500, count=2)
    for _ in range(2):
        with pytest.raises(ApiException) as excinfo:
            create_job(custom, vcjob("train-1"))
        assert excinfo.value.status == 500
        assert json.loads(excinfo.value.body)["reason"] == "InternalError"
    assert create_job(custom, vcjob("train-1"))["metadata"]["name"] == "train-1"
    assert fault.hits == 2
    assert sim.faults.count(verb="create", resource="jobs") == 2
    assert sim.faults.count(verb="get") == 0


def test_429_carries_retry_after_in_header_and_details(sim):
    sim.faults.add(verb="list", resource="pods", status=429, retry_after=7, namespace="team-a")
    status, headers, body = raw(sim, "GET", "/api/v1/namespaces/team-a/pods")
    assert status == 429
    assert headers["retry-after"] == "7"
    assert body["reason"] == "TooManyRequests"
    assert body["details"] == {"retryAfterSeconds": 7}
    assert raw(sim, "GET", "/api/v1/namespaces/team-a/pods")[0] == 200


def test_the_client_retries_a_429_get_by_itself(sim, core):
    # urllib3, under the official client, honours Retry-After on idempotent requests.
    sim.faults.add(verb="list", resource="nodes", status=429, retry_after=0)
    assert len(core.list_node().items) == 3
    assert sim.faults.count(verb="list", resource="nodes") == 1


def test_a_hang_outlasts_the_client_timeout(sim):
    sim.faults.add(verb="get", resource="queues", hang=1.0)
    started = time.monotonic()
    with pytest.raises((socket.timeout, TimeoutError)):
        raw(sim, "GET", f"/apis/{SCHED}/v1beta1/queues/default", timeout=0.2)
    assert time.monotonic() - started < 0.9
    assert sim.faults.count(kind="hang") == 1
    status, _, body = raw(sim, "GET", f"/apis/{SCHED}/v1beta1/queues/default")
    assert status == 200 and body["metadata"]["name"] == "default"


def test_a_hang_with_a_status_answers_late_and_wrong(sim):
    sim.faults.add(verb="delete", resource="jobs", hang=0.2, status=503)
    started = time.monotonic()
    status, _, body = raw(sim, "DELETE", "/apis/batch.volcano.sh/v1alpha1/namespaces/team-a/jobs/x")
    assert status == 503 and body["reason"] == "ServiceUnavailable"
    assert time.monotonic() - started >= 0.2


def test_injected_409_on_create_looks_like_already_exists(sim, custom):
    sim.faults.add(verb="create", resource="jobs", status=409)
    with pytest.raises(ApiException) as excinfo:
        create_job(custom, vcjob("train-1"))
    assert excinfo.value.status == 409
    assert json.loads(excinfo.value.body)["reason"] == "AlreadyExists"


def test_faults_match_namespace_name_and_subresource(sim, core, custom):
    sim.faults.add(verb="get", resource="pods/log", status=500, count=-1)
    sim.faults.add(verb="get", resource="jobs", name="target", status=404)
    create_job(custom, vcjob("target"))
    sim.settle()
    sim.advance(3)
    assert core.read_namespaced_pod("target-worker-0", "team-a")  # plain get is unaffected
    for _ in range(3):
        with pytest.raises(ApiException):
            core.read_namespaced_pod_log("target-worker-0", "team-a")
    assert sim.faults.count(resource="pods/log") == 3
    assert sim.faults.count(resource="pods") == 3  # the base resource counts its subresources
    with pytest.raises(ApiException) as excinfo:
        custom.get_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", "team-a", "jobs", "target"
        )
    assert excinfo.value.status == 404


def test_control_endpoint_arms_and_counts_faults_over_http(sim, core):
    status, _, body = raw(
        sim,
        "POST",
        "/kubesim/v1/faults",
        {"verb": "list", "resource": "nodes", "status": 503, "count": 1},
    )
    assert status == 200 and body["kind"] == "error"
    with pytest.raises(ApiException) as excinfo:
        core.list_node()
    assert excinfo.value.status == 503
    _, _, counted = raw(sim, "GET", "/kubesim/v1/faults/count?verb=list&resource=nodes")
    assert counted == {"count": 1}
    _, _, listing = raw(sim, "GET", "/kubesim/v1/faults")
    assert listing["fired"][0]["status"] == 503
    assert raw(sim, "DELETE", "/kubesim/v1/faults")[2] == {"cleared": True}
    assert sim.faults.count() == 0
    raw(sim, "POST", "/kubesim/v1/faults", {"kind": "compact"})
    assert sim.faults.count(kind="compact") == 1


def test_control_endpoint_is_for_admins_only(sim):
    status, _, body = raw(sim, "GET", "/kubesim/v1/stats", token="viewer-token")
    assert (status, body["reason"]) == (403, "Forbidden")
    assert raw(sim, "GET", "/kubesim/v1/stats", token=None)[0] == 401


def test_control_endpoint_drives_time_and_nodes(sim, custom):
    create_job(custom, vcjob("train-1", duration=10))
    sim.settle()
    status, _, _ = raw(sim, "POST", "/kubesim/v1/advance", {"seconds": 20})
    assert status == 200
    assert sim.job_phase("team-a", "train-1") == "Completed"
    assert raw(sim, "POST", "/kubesim/v1/nodes/a100-0/cordon")[0] == 200
    assert sim.get("nodes", "a100-0")["spec"]["unschedulable"] is True
    assert raw(sim, "POST", "/kubesim/v1/nodes/nope/cordon")[0] == 404
    assert raw(sim, "POST", "/kubesim/v1/queues/team-b/close")[0] == 200
    assert sim.get("queues", "team-b")["status"]["state"] == "Closed"
    _, _, stats = raw(sim, "GET", "/kubesim/v1/stats")
    assert stats["pods_bound"] == 1 and stats["objects"]["nodes"] == 3


def test_faults_do_not_leak_between_servers(sim):
    from kubesim import KubeSim
    from tests.kubesim.conftest import TINY

    sim.faults.add(verb="*", resource="*", status=500, count=-1)
    with KubeSim(TINY, clock_speed=0) as other:
        api = make_client(other)
        assert len(client.CoreV1Api(api).list_node().items) == 3
        api.close()
