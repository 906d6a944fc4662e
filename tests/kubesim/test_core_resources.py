"""Core v1 as the portal uses it: nodes, namespaces, pods, logs, events; selectors; paging."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubesim.builders import create_job, vcjob
from tests.kubesim.conftest import raw


def test_nodes_carry_gpu_labels_and_string_quantities(core):
    nodes = core.list_node().items
    assert [n.metadata.name for n in nodes] == ["a100-0", "a100-1", "a100-2"]
    node = core.read_node("a100-1")
    labels = node.metadata.labels
    assert labels["gpu-type"] == "a100-80gb"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.memory"] == "81920"
    assert node.status.allocatable["nvidia.com/gpu"] == "4"
    assert node.status.allocatable["memory"] == "256Gi"
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert ready.status == "True"


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("gpu-type=a100-80gb", 3),
        ("gpu-type==a100-80gb,kubernetes.io/hostname!=a100-0", 2),
        ("kubernetes.io/hostname in (a100-0, a100-2)", 2),
        ("kubernetes.io/hostname notin (a100-0)", 2),
        ("nvidia.com/gpu.product", 3),
        ("!nvidia.com/mig.strategy", 3),
        ("gpu-type=h100", 0),
    ],
    ids=[
        "equality",
        "equality and inequality",
        "set in",
        "set notin",
        "exists",
        "does not exist",
        "no match",
    ],
)
def test_label_selectors_on_nodes(core, selector, expected):
    assert len(core.list_node(label_selector=selector).items) == expected


def test_field_selectors_on_nodes_and_pods(sim, core, custom):
    assert [
        n.metadata.name for n in core.list_node(field_selector="metadata.name=a100-1").items
    ] == ["a100-1"]
    create_job(custom, vcjob("train-1", replicas=2, gpus=4))
    sim.settle()
    on_node = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=a100-0").items
    # the job's pod, and the GPU Operator's device plugin and DCGM exporter
    assert sorted(p.metadata.namespace for p in on_node) == ["gpu-operator"] * 2 + ["team-a"]
    sim.advance(3)
    running = core.list_namespaced_pod("team-a", field_selector="status.phase=Running").items
    assert len(running) == 2
    assert core.list_namespaced_pod("team-a", field_selector="status.phase!=Running").items == []


def test_bad_selectors_are_400(sim):
    status, _, body = raw(sim, "GET", "/api/v1/nodes?labelSelector=a%20in%20(")
    assert (status, body["reason"]) == (400, "BadRequest")
    status, _, body = raw(sim, "GET", "/api/v1/nodes?fieldSelector=spec.color%3Dred")
    assert status == 400
    assert body["message"] == "field label not supported: spec.color"


def test_limit_and_continue_page_through_a_list(sim, core, custom):
    create_job(custom, vcjob("many", replicas=10, gpus=0, min_available=1))
    sim.settle()
    seen, token, pages = [], None, 0
    while True:
        page = core.list_namespaced_pod("team-a", limit=4, _continue=token)
        seen += [p.metadata.name for p in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 10 - len(seen)
    assert pages == 3
    assert seen == sorted(seen) and len(set(seen)) == 10


def test_continue_token_past_compaction_is_410(sim, core, custom):
    create_job(custom, vcjob("many", replicas=5, gpus=0, min_available=1))
    sim.settle()
    first = core.list_namespaced_pod("team-a", limit=2)
    sim.compact()
    with pytest.raises(ApiException) as excinfo:
        core.list_namespaced_pod("team-a", limit=2, _continue=first.metadata._continue)
    assert excinfo.value.status == 410
    assert json.loads(excinfo.value.body)["reason"] == "Expired"


def test_namespaces_create_get_list_delete(sim, core, custom):
    created = core.create_namespace({"metadata": {"name": "team-c", "labels": {"tier": "gold"}}})
    assert created.status.phase == "Active"
    assert created.metadata.labels["kubernetes.io/metadata.name"] == "team-c"
    assert core.read_namespace("team-c").metadata.uid == created.metadata.uid
    names = {ns.metadata.name for ns in core.list_namespace(label_selector="tier=gold").items}
    assert names == {"team-c"}
    sim.add_queue("team-c")
    create_job(custom, vcjob("train-1", namespace="team-c", queue="team-c"))
    sim.settle()
    core.delete_namespace("team-c")
    assert core.read_namespace("team-c").status.phase == "Terminating"
    with pytest.raises(ApiException) as excinfo:
        create_job(custom, vcjob("train-2", namespace="team-c", queue="team-c"))
    assert excinfo.value.status == 403
    assert "because it is being terminated" in json.loads(excinfo.value.body)["message"]
    sim.advance(5)
    with pytest.raises(ApiException) as excinfo:
        core.read_namespace("team-c")
    assert excinfo.value.status == 404
    assert sim.list("pods", "team-c") == [] and sim.list("jobs", "team-c") == []


def test_namespace_errors(sim, core):
    with pytest.raises(ApiException) as excinfo:
        core.create_namespace({"metadata": {"name": "team-a"}})
    assert excinfo.value.status == 409
    assert json.loads(excinfo.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as excinfo:
        core.create_namespace({"metadata": {"name": "Team_A"}})
    body = json.loads(excinfo.value.body)
    assert (excinfo.value.status, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    with pytest.raises(ApiException) as excinfo:
        core.delete_namespace("default")
    assert excinfo.value.status == 403


def test_not_found_is_a_404_status_naming_the_object(sim):
    status, _, body = raw(sim, "GET", "/api/v1/namespaces/team-a/pods/nope")
    assert status == 404
    assert body["message"] == 'pods "nope" not found'
    assert body["details"] == {"kind": "pods", "name": "nope"}
    status, _, body = raw(sim, "GET", "/api/v1/namespaces/nowhere/pods")
    assert status == 200 and body["items"] == []


def test_pod_logs_with_tail_and_timestamps(sim, core, custom):
    create_job(custom, vcjob("train-1", duration=100))
    sim.settle()
    with pytest.raises(ApiException) as excinfo:
        core.read_namespaced_pod_log("train-1-worker-0", "team-a")
    assert excinfo.value.status == 400
    assert "is waiting to start: ContainerCreating" in json.loads(excinfo.value.body)["message"]
    sim.advance(60)
    log = core.read_namespaced_pod_log("train-1-worker-0", "team-a")
    assert log.splitlines()[0].startswith("kubesim: container trainer started on a100-0")
    assert "step 5:" in log
    tail = core.read_namespaced_pod_log("train-1-worker-0", "team-a", tail_lines=2, timestamps=True)
    assert len(tail.splitlines()) == 2
    assert tail.splitlines()[0][:4].isdigit() and "Z " in tail.splitlines()[0]
    sim.advance(60)
    finished = core.read_namespaced_pod_log("train-1-worker-0", "team-a", container="trainer")
    assert finished.splitlines()[-1].endswith("exit 0")


def test_followed_log_of_a_finished_pod_ends(sim, core, custom):
    create_job(custom, vcjob("train-1", duration=30))
    sim.settle()
    sim.advance(40)
    response = core.read_namespaced_pod_log(
        "train-1-worker-0", "team-a", follow=True, _preload_content=False
    )
    text = response.data.decode()
    assert text.splitlines()[-1].endswith("exit 0")


def test_events_are_listed_and_selected_by_involved_object(sim, core, custom):
    create_job(custom, vcjob("train-1"))
    sim.settle()
    events = core.list_namespaced_event(
        "team-a", field_selector="involvedObject.name=train-1-worker-0,reason=Scheduled"
    ).items
    assert len(events) == 1
    assert events[0].message == "Successfully assigned team-a/train-1-worker-0 to a100-0"
    assert events[0].involved_object.kind == "Pod"
    assert events[0].count == 1
    assert core.list_event_for_all_namespaces().items


def test_nodes_can_be_patched_and_cordoned_through_the_client(sim, core, custom):
    core.patch_node("a100-0", {"metadata": {"labels": {"rack": "r1"}}})
    assert core.read_node("a100-0").metadata.labels["rack"] == "r1"
    for name in ("a100-0", "a100-1", "a100-2"):
        core.patch_node(name, {"spec": {"unschedulable": True}})
    create_job(custom, vcjob("train-1"))
    sim.settle()
    pod = core.read_namespaced_pod("train-1-worker-0", "team-a")
    assert pod.spec.node_name is None
    assert pod.status.conditions[0].message == (
        "0/3 nodes are unavailable: 3 node(s) were unschedulable."
    )
    core.patch_node("a100-2", {"spec": {"unschedulable": False}})
    sim.settle()
    assert core.read_namespaced_pod("train-1-worker-0", "team-a").spec.node_name == "a100-2"


def test_pods_are_deleted_gracefully(sim, core, custom):
    create_job(custom, vcjob("train-1", duration=1000))
    sim.settle()
    sim.advance(3)
    deleted = core.delete_namespaced_pod("train-1-worker-0", "team-a")
    assert deleted.metadata.deletion_timestamp is not None
    assert core.read_namespaced_pod("train-1-worker-0", "team-a").metadata.deletion_timestamp
    sim.advance(2)
    # Volcano recreates a deleted pod of a running job under the same name
    pod = core.read_namespaced_pod("train-1-worker-0", "team-a")
    assert pod.metadata.uid != deleted.metadata.uid
    assert pod.metadata.deletion_timestamp is None


def test_pod_updates_may_change_labels_only(sim, core, custom):
    create_job(custom, vcjob("train-1"))
    sim.settle()
    core.patch_namespaced_pod("train-1-worker-0", "team-a", {"metadata": {"labels": {"x": "y"}}})
    assert core.read_namespaced_pod("train-1-worker-0", "team-a").metadata.labels["x"] == "y"
    with pytest.raises(ApiException) as excinfo:
        core.patch_namespaced_pod("train-1-worker-0", "team-a", {"spec": {"nodeName": "a100-2"}})
    assert excinfo.value.status == 422


def test_pod_list_items_deserialize_into_typed_models(sim, core, custom):
    create_job(custom, vcjob("train-1", replicas=2, gpus=2))
    sim.settle()
    sim.advance(3)
    pods = core.list_namespaced_pod("team-a", label_selector="volcano.sh/job-name=train-1").items
    assert {p.status.phase for p in pods} == {"Running"}
    pod = pods[0]
    assert isinstance(pod, client.V1Pod)
    assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "2"}
    assert pod.status.container_statuses[0].ready is True
    assert pod.metadata.owner_references[0].kind == "Job"
    assert pod.metadata.annotations["scheduling.k8s.io/group-name"].startswith("train-1-")


def test_pod_logs_since_a_time_or_some_seconds_ago(sim, core, custom):
    """``sinceTime`` / ``sinceSeconds`` keep the lines written at or after that instant, on
    the server's (simulated) clock, as the kubelet answers them: a client tails a log by
    asking for the lines after the last one it has."""
    create_job(custom, vcjob("train-1", duration=1000))
    sim.settle()
    sim.advance(65)
    lines = core.read_namespaced_pod_log("train-1-worker-0", "team-a", timestamps=True)
    stamps = [line.split(" ", 1)[0] for line in lines.splitlines()]
    assert len(stamps) >= 6
    path = "/api/v1/namespaces/team-a/pods/train-1-worker-0/log"
    status, _, body = raw(sim, "GET", f"{path}?timestamps=true&sinceTime={stamps[-2]}")
    assert status == 200
    assert [line.split(" ", 1)[0] for line in body.splitlines()] == stamps[-2:]
    recent = core.read_namespaced_pod_log(
        "train-1-worker-0", "team-a", since_seconds=25, timestamps=True
    )
    # the last ~2 of the lines written every 10 simulated seconds: a suffix of the whole log
    assert 2 <= len(recent.splitlines()) <= 3
    assert lines.splitlines()[-len(recent.splitlines()) :] == recent.splitlines()
    sim.advance(20)
    newer = core.read_namespaced_pod_log("train-1-worker-0", "team-a", since_seconds=25)
    assert newer.splitlines()[-1].startswith("step 8:")
    for query, message in (
        ("sinceSeconds=0", "must be greater than 0"),
        ("sinceSeconds=5&sinceTime=2025-01-01T00:00:00Z", "at most one of sinceTime"),
        ("sinceTime=yesterday", "cannot parse"),
    ):
        status, _, body = raw(sim, "GET", f"{path}?{query}")
        assert status == 400 and message in body["message"], query
