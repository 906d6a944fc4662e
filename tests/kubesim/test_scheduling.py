"""The simulated Volcano scheduler: gangs, queues, selectors, taints and resources."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubesim import KubeSim
from tests.kubesim.builders import create_job, vcjob
from tests.kubesim.conftest import TINY

INSUFFICIENT_GPU = "0/3 nodes are unavailable: 3 Insufficient nvidia.com/gpu."


def _bound(sim: KubeSim, job: str, namespace: str = "team-a") -> list[str]:
    return sorted(
        p["spec"].get("nodeName") or ""
        for p in sim.job_pods(namespace, job)
        if p["spec"].get("nodeName")
    )


def _condition(sim: KubeSim, job: str, namespace: str = "team-a") -> dict[str, Any]:
    group = sim.podgroup(namespace, job)
    assert group is not None
    conditions = group["status"].get("conditions") or [{}]
    return conditions[0]


def test_a_gang_is_bound_all_at_once_or_not_at_all(sim, custom):
    create_job(custom, vcjob("small", queue="team-b", namespace="team-b", gpus=2, duration=100))
    sim.settle()
    assert _bound(sim, "small", "team-b") == ["a100-0"]
    # 3 x 3 GPUs: two pods would fit (a100-1, a100-2) but the third would not -> none bound
    create_job(custom, vcjob("gang", queue="team-b", namespace="team-b", replicas=3, gpus=3))
    sim.settle()
    pods = sim.job_pods("team-b", "gang")
    assert len(pods) == 3
    assert _bound(sim, "gang", "team-b") == []
    condition = _condition(sim, "gang", "team-b")
    assert condition["type"] == "Unschedulable"
    assert condition["reason"] == "NotEnoughResources"
    assert condition["message"].endswith(INSUFFICIENT_GPU)
    assert condition["message"].startswith("3/3 tasks in gang unschedulable")
    assert sim.job_phase("team-b", "gang") == "Pending"
    pod_condition = pods[0]["status"]["conditions"][0]
    assert (pod_condition["type"], pod_condition["status"]) == ("PodScheduled", "False")
    assert pod_condition["message"] == INSUFFICIENT_GPU
    reasons = {(e["reason"], e["involvedObject"]["kind"]) for e in sim.events("team-b")}
    assert {
        ("FailedScheduling", "Pod"),
        ("Unschedulable", "PodGroup"),
        ("PodGroupPending", "Job"),
    } <= reasons
    # when the small job ends, the whole gang lands together
    sim.advance(110)
    assert _bound(sim, "gang", "team-b") == ["a100-0", "a100-1", "a100-2"]
    assert sim.podgroup("team-b", "gang")["status"]["conditions"][0]["type"] == "Scheduled"


def test_min_available_below_replicas_binds_what_fits(sim, custom):
    create_job(
        custom,
        vcjob("elastic", queue="team-b", namespace="team-b", replicas=4, gpus=4, min_available=2),
    )
    sim.settle()
    assert len(_bound(sim, "elastic", "team-b")) == 3
    sim.advance(3)
    assert sim.job_phase("team-b", "elastic") == "Running"


def test_queue_capability_caps_the_queue_total(sim, custom):
    create_job(custom, vcjob("big", replicas=2, gpus=4, duration=100))  # team-a cap: 8 GPUs
    create_job(custom, vcjob("one-more", gpus=1))
    sim.settle()
    assert len(_bound(sim, "big")) == 2
    assert sim.job_pods("team-a", "one-more") == []  # not enqueued: Volcano creates no pods
    condition = _condition(sim, "one-more")
    assert condition["type"] == "Unschedulable"
    assert "queue team-a resource quota insufficient" in condition["message"]
    queue = sim.get("queues", "team-a")
    assert queue["status"]["allocated"]["nvidia.com/gpu"] == "8"
    assert queue["status"]["running"] == 1 and queue["status"]["pending"] == 1
    sim.advance(110)
    assert len(_bound(sim, "one-more")) == 1


def test_node_selector_mismatch_stays_pending_with_the_reason(sim, custom, core):
    create_job(custom, vcjob("wrong-model", node_selector={"gpu-type": "h100"}))
    sim.settle()
    sim.advance(60)
    pod = core.read_namespaced_pod("wrong-model-worker-0", "team-a")
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    message = "0/3 nodes are unavailable: 3 node(s) didn't match Pod's node affinity/selector."
    assert pod.status.conditions[0].reason == "Unschedulable"
    assert pod.status.conditions[0].message == message
    events = core.list_namespaced_event(
        "team-a", field_selector="involvedObject.name=wrong-model-worker-0,reason=FailedScheduling"
    ).items
    assert events[0].message == message and events[0].type == "Warning"
    assert sim.job_phase("team-a", "wrong-model") == "Pending"


def test_node_affinity_over_product_labels(sim, custom):
    manifest = vcjob("affine")
    manifest["spec"]["tasks"][0]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "In",
                                "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"],
                            },
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "NotIn",
                                "values": ["a100-0"],
                            },
                        ]
                    }
                ]
            }
        }
    }
    create_job(custom, manifest)
    sim.settle()
    assert _bound(sim, "affine") == ["a100-1"]


def test_resource_requests_cpu_and_memory(sim, custom):
    manifest = vcjob("cpu-hungry", gpus=0)
    manifest["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "31", "memory": "200Gi"}
    }
    create_job(custom, manifest)
    sim.settle()
    assert _bound(sim, "cpu-hungry") == ["a100-0"]
    second = vcjob("cpu-hungry-2", gpus=0)
    second["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "40"}
    }
    create_job(custom, second)
    sim.settle()
    assert _bound(sim, "cpu-hungry-2") == []


def test_closed_queue_holds_pending_pod_groups_until_opened(sim, custom):
    create_job(custom, vcjob("big", replicas=2, gpus=4, duration=50))
    create_job(custom, vcjob("waiting", gpus=1))
    sim.settle()
    sim.close_queue("team-a")
    sim.advance(60)  # capacity is back, but the queue is closed
    assert sim.job_pods("team-a", "waiting") == []
    # Closing, not Closed: the queue still has PodGroups (finished "big" and "waiting")
    assert 'queue "team-a" is Closing' in _condition(sim, "waiting")["message"]
    sim.open_queue("team-a")
    sim.settle()
    assert len(_bound(sim, "waiting")) == 1


def test_cordoned_nodes_are_skipped(sim, custom):
    for name in ("a100-0", "a100-1"):
        sim.cordon(name)
    create_job(custom, vcjob("train", replicas=2, gpus=1))
    sim.settle()
    assert _bound(sim, "train") == ["a100-2", "a100-2"]
    sim.cordon("a100-2")
    create_job(custom, vcjob("late", gpus=1))
    sim.settle()
    assert _condition(sim, "late")["message"].endswith(
        "0/3 nodes are unavailable: 3 node(s) were unschedulable."
    )
    sim.uncordon("a100-0")
    sim.settle()
    assert _bound(sim, "late") == ["a100-0"]


TAINTED: dict[str, Any] = {
    **TINY,
    "nodePools": [
        {
            "name": "gpu",
            "count": 2,
            "gpuModel": "t4",
            "gpus": 1,
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        {
            "name": "mig",
            "count": 1,
            "gpuModel": "a100-80gb",
            "gpus": 8,
            "mig": {"gpus": 2, "profiles": {"1g.10gb": 14}},
        },
    ],
}


@pytest.mark.parametrize("sim_config", [TAINTED])
def test_taints_need_tolerations(sim, custom):
    create_job(custom, vcjob("plain", node_selector={"gpu-type": "t4"}))
    sim.settle()
    message = _condition(sim, "plain")["message"]
    assert message.endswith(
        "0/3 nodes are unavailable: 1 node(s) didn't match Pod's node "
        "affinity/selector, 2 node(s) had untolerated taint "
        "{nvidia.com/gpu: present}."
    )
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    create_job(
        custom, vcjob("tolerant", node_selector={"gpu-type": "t4"}, tolerations=[toleration])
    )
    sim.settle()
    assert _bound(sim, "tolerant") == ["gpu-0"]


@pytest.mark.parametrize("sim_config", [TAINTED])
def test_mig_slices_are_a_resource_of_their_own(sim, custom, core):
    node = core.read_node("mig-0")
    assert node.status.allocatable["nvidia.com/mig-1g.10gb"] == "14"
    assert node.status.allocatable["nvidia.com/gpu"] == "6"
    assert node.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    create_job(custom, vcjob("slices", replicas=2, gpus=7, gpu_resource="nvidia.com/mig-1g.10gb"))
    sim.settle()
    assert _bound(sim, "slices") == ["mig-0", "mig-0"]
    create_job(custom, vcjob("one-slice-more", gpus=1, gpu_resource="nvidia.com/mig-1g.10gb"))
    sim.settle()
    assert "Insufficient nvidia.com/mig-1g.10gb" in _condition(sim, "one-slice-more")["message"]


# -- invariants over random workloads -----------------------------------------------------
_gangs = st.lists(
    st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(0, 3)),  # replicas, gpus, slack
    min_size=1,
    max_size=6,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_gangs)
def test_gangs_are_all_or_nothing_and_nodes_never_overcommitted(gangs):
    sim = KubeSim({**TINY, "queues": [{"name": "team-a"}]}, tls=False, clock_speed=0)
    for index, (replicas, gpus, slack) in enumerate(gangs):
        min_available = max(replicas - slack, 1)
        sim.create(vcjob(f"job-{index}", replicas=replicas, gpus=gpus, min_available=min_available))
    sim.settle()
    for index, (replicas, _gpus, slack) in enumerate(gangs):
        bound = [p for p in sim.job_pods("team-a", f"job-{index}") if p["spec"].get("nodeName")]
        assert len(bound) == 0 or len(bound) >= max(replicas - slack, 1)
    used: dict[str, int] = {}
    for pod in sim.list("pods", "team-a"):
        node = pod["spec"].get("nodeName")
        if node:
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            used[node] = used.get(node, 0) + int(limits["nvidia.com/gpu"])
    assert all(total <= 4 for total in used.values()), json.dumps(used)


def test_queue_status_keeps_up_with_a_stream_of_creates(sim, custom):
    """Publishing is deferred while creates keep coming (it counts every job), never dropped:
    the status catches up without anyone calling settle()."""
    import time

    for i in range(30):
        create_job(custom, vcjob(f"stream-{i}", gpus=1, duration=100))
    deadline = time.monotonic() + 5
    while True:
        status = sim.get("queues", "team-a").get("status") or {}
        total = sum(status.get(k, 0) for k in ("pending", "inqueue", "running"))
        if total == 30 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert total == 30, status
