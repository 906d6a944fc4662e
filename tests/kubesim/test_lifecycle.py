"""Kubelet and Volcano job controller: phases, failures, retries, policies, node events."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.kubesim.builders import GROUP, VERSION, create_job, phase, vcjob

FAIL = "kubesim.gpupool.dev/fail"
EXIT = "kubesim.gpupool.dev/exit-code"


def _pods(sim, job: str) -> list[dict]:
    return sim.job_pods("team-a", job)


def _container(pod: dict) -> dict:
    return pod["status"]["containerStatuses"][0]


def test_phases_progress_pending_running_completed(sim, custom):
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, "team-a", "jobs")
    create_job(custom, vcjob("train-1", replicas=2, duration=120))
    sim.settle()
    assert phase(custom, "train-1") == "Pending"
    status = sim.get("jobs", "train-1", "team-a")["status"]
    assert status["pending"] == 2 and status["running"] == 0
    sim.advance(3)
    assert phase(custom, "train-1") == "Running"
    status = sim.get("jobs", "train-1", "team-a")["status"]
    assert status["running"] == 2
    assert status["taskStatusCount"] == {"worker": {"phase": {"Running": 2}}}
    sim.advance(120)
    job = sim.get("jobs", "train-1", "team-a")
    assert job["status"]["state"]["phase"] == "Completed"
    assert job["status"]["succeeded"] == 2
    assert [c["status"] for c in job["status"]["conditions"]] == ["Running", "Completed"]
    assert all(p["status"]["phase"] == "Succeeded" for p in _pods(sim, "train-1"))
    assert _container(_pods(sim, "train-1")[0])["state"]["terminated"]["reason"] == "Completed"
    assert sim.podgroup("team-a", "train-1")["status"]["phase"] == "Completed"
    phases = []
    for event in watch.Watch().stream(
        custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        "team-a",
        "jobs",
        resource_version=listed["metadata"]["resourceVersion"],
        timeout_seconds=5,
    ):
        current = event["object"].get("status", {}).get("state", {}).get("phase")
        if current and (not phases or phases[-1] != current):
            phases.append(current)
        if current == "Completed":
            break
    assert phases == ["Pending", "Running", "Completed"]


def test_sleep_in_the_command_sets_the_run_time(sim, custom):
    create_job(custom, vcjob("sleepy", duration=None, command=["sh", "-c", "sleep 30; echo ok"]))
    sim.settle()
    sim.advance(31)
    assert phase(custom, "sleepy") == "Running"
    sim.advance(2)
    assert phase(custom, "sleepy") == "Completed"


def test_exit_code_without_policy_fails_the_job(sim, custom):
    create_job(custom, vcjob("broken", annotations={EXIT: "3"}, duration=10))
    sim.settle()
    sim.advance(15)
    pod = _pods(sim, "broken")[0]
    assert pod["status"]["phase"] == "Failed"
    terminated = _container(pod)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert phase(custom, "broken") == "Failed"
    assert sim.get("jobs", "broken", "team-a")["status"]["failed"] == 1


def test_oom_killed_is_reported_like_the_kubelet(sim, custom, core):
    create_job(custom, vcjob("oom", annotations={FAIL: "OOMKilled"}, duration=5))
    sim.settle()
    sim.advance(10)
    pod = core.read_namespaced_pod("oom-worker-0", "team-a")
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (137, "OOMKilled")
    assert "CUDA out of memory" in core.read_namespaced_pod_log("oom-worker-0", "team-a")


@pytest.mark.parametrize(
    ("image", "annotations"),
    [("registry.example/doesnotexist:1", {}), ("example/ok:1", {FAIL: "ImagePullBackOff"})],
    ids=["image name", "annotation"],
)
def test_bad_image_stays_pending_in_image_pull_back_off(sim, custom, core, image, annotations):
    create_job(custom, vcjob("pull", image=image, annotations=annotations))
    sim.settle()
    sim.advance(30)
    pod = core.read_namespaced_pod("pull-worker-0", "team-a")
    waiting = pod.status.container_statuses[0].state.waiting
    assert pod.status.phase == "Pending" and waiting.reason == "ImagePullBackOff"
    assert phase(custom, "pull") == "Pending"
    reasons = {
        e.reason
        for e in core.list_namespaced_event(
            "team-a", field_selector="involvedObject.name=pull-worker-0"
        ).items
    }
    assert {"Scheduled", "Failed", "BackOff"} <= reasons


def test_restart_job_policy_retries_up_to_max_retry(sim, custom):
    create_job(
        custom,
        vcjob(
            "flaky",
            annotations={EXIT: "1"},
            duration=10,
            max_retry=2,
            policies=[{"event": "PodFailed", "action": "RestartJob"}],
        ),
    )
    sim.settle()
    sim.advance(13)
    job = sim.get("jobs", "flaky", "team-a")
    assert job["status"]["state"]["phase"] in ("Restarting", "Pending")
    assert job["status"]["retryCount"] == 1
    sim.advance(60)
    job = sim.get("jobs", "flaky", "team-a")
    assert job["status"]["state"]["phase"] == "Failed"
    assert job["status"]["retryCount"] == 2
    history = [c["status"] for c in job["status"]["conditions"]]
    assert history.count("Restarting") == 2 and history[-1] == "Failed"


def test_a_retry_can_succeed(sim, custom):
    create_job(
        custom,
        vcjob(
            "second-time-lucky",
            duration=10,
            annotations={EXIT: "1", "kubesim.gpupool.dev/fail-attempts": "1"},
            policies=[{"event": "PodFailed", "action": "RestartJob"}],
        ),
    )
    sim.settle()
    sim.advance(60)
    job = sim.get("jobs", "second-time-lucky", "team-a")
    assert job["status"]["state"]["phase"] == "Completed"
    assert job["status"]["retryCount"] == 1 and job["status"]["version"] == 1
    pod = _pods(sim, "second-time-lucky")[0]
    assert pod["metadata"]["annotations"]["volcano.sh/job-retry-count"] == "1"


def test_pod_failed_abort_job_policy(sim, custom):
    create_job(
        custom,
        vcjob(
            "abort-me",
            replicas=2,
            annotations={EXIT: "2"},
            duration=10,
            policies=[{"event": "PodFailed", "action": "AbortJob"}],
        ),
    )
    sim.settle()
    sim.advance(13)
    assert phase(custom, "abort-me") in ("Aborting", "Aborted")
    sim.advance(5)
    assert phase(custom, "abort-me") == "Aborted"


def test_task_completed_completes_the_job_through_completing(sim, custom):
    worker = vcjob("x", duration=1000)["spec"]["tasks"][0]
    worker = {**worker, "name": "worker"}
    manifest = vcjob(
        "pytorch",
        duration=None,
        task_policies=[{"event": "TaskCompleted", "action": "CompleteJob"}],
        extra_tasks=[worker],
    )
    manifest["spec"]["tasks"][0]["name"] = "master"
    manifest["spec"]["tasks"][0]["template"]["metadata"] = {
        "annotations": {"kubesim.gpupool.dev/duration-seconds": "20"}
    }
    manifest["spec"]["tasks"][1]["template"]["metadata"] = {
        "annotations": {"kubesim.gpupool.dev/duration-seconds": "1000"}
    }
    create_job(custom, manifest)
    sim.settle()
    sim.advance(22.5)  # master done at 22 s; the worker takes 1 s to terminate
    assert phase(custom, "pytorch") == "Completing"
    worker_pod = sim.get("pods", "pytorch-worker-0", "team-a")
    assert worker_pod["metadata"]["deletionTimestamp"]
    sim.advance(2)
    assert phase(custom, "pytorch") == "Completed"
    assert sim.get("pods", "pytorch-worker-0", "team-a") is None
    assert sim.get("pods", "pytorch-master-0", "team-a")["status"]["phase"] == "Succeeded"


def test_restart_policy_on_failure_crash_loops_in_place(sim, custom, core):
    create_job(
        custom, vcjob("loop", annotations={EXIT: "1"}, duration=5, restart_policy="OnFailure")
    )
    sim.settle()
    sim.advance(9)
    pod = core.read_namespaced_pod("loop-worker-0", "team-a")
    status = pod.status.container_statuses[0]
    assert pod.status.phase == "Running"
    assert status.restart_count == 1 and status.state.waiting.reason == "CrashLoopBackOff"
    assert status.last_state.terminated.exit_code == 1
    sim.advance(60)
    assert (
        core.read_namespaced_pod("loop-worker-0", "team-a")
        .status.container_statuses[0]
        .restart_count
        >= 2
    )
    assert phase(custom, "loop") == "Running"


def _resilient(sim: Any, custom: Any, name: str) -> str:
    """A running job that restarts on PodEvicted; returns its pod's node."""
    create_job(
        custom,
        vcjob(
            name,
            duration=1000,
            max_retry=3,
            policies=[{"event": "PodEvicted", "action": "RestartJob"}],
        ),
    )
    sim.settle()
    sim.advance(3)
    return str(_pods(sim, name)[0]["spec"]["nodeName"])


def test_pods_evicted_from_a_not_ready_node_stay_terminating_until_it_returns(sim, custom, core):
    """No kubelet confirms the end of a pod on an unreachable node: the taint manager's delete
    only sets its deletionTimestamp. Volcano restarts the gang at once, but its pod of that
    name stays Terminating, so the job waits Restarting until the node comes back."""
    node = _resilient(sim, custom, "resilient")
    uid = _pods(sim, "resilient")[0]["metadata"]["uid"]
    sim.node_not_ready(node)
    ready = next(c for c in core.read_node(node).status.conditions if c.type == "Ready")
    assert ready.status == "Unknown"
    assert {t.key for t in core.read_node(node).spec.taints} == {"node.kubernetes.io/unreachable"}
    sim.advance(60)
    job = sim.get("jobs", "resilient", "team-a")
    assert job["status"]["retryCount"] == 1
    assert job["status"]["state"]["phase"] == "Restarting"
    (pod,) = _pods(sim, "resilient")
    assert pod["metadata"]["uid"] == uid and pod["metadata"].get("deletionTimestamp")
    assert pod["spec"]["nodeName"] == node

    sim.node_ready(node)  # its kubelet reports again and confirms the end
    assert (
        next(c for c in core.read_node(node).status.conditions if c.type == "Ready").status
        == "True"
    )
    assert not core.read_node(node).spec.taints
    sim.advance(10)
    job = sim.get("jobs", "resilient", "team-a")
    assert job["status"]["retryCount"] == 1
    assert job["status"]["state"]["phase"] == "Running"
    (pod,) = _pods(sim, "resilient")
    assert pod["metadata"]["uid"] != uid and not pod["metadata"].get("deletionTimestamp")


@pytest.mark.parametrize("how", ["Node deleted", "out-of-service taint"])
def test_the_pod_gc_ends_pods_of_a_dead_node_and_the_job_restarts_elsewhere(sim, custom, core, how):
    """The Node deleted, or tainted ``node.kubernetes.io/out-of-service`` by an admin who
    knows it is down: the pod garbage collector force-deletes its pods at once."""
    node = _resilient(sim, custom, "gone")
    sim.node_not_ready(node)
    sim.advance(5)
    assert _pods(sim, "gone")[0]["metadata"].get("deletionTimestamp")
    if how == "Node deleted":
        sim.delete_node(node)
    else:
        taints = [t.to_dict() for t in core.read_node(node).spec.taints or []]
        taints.append({"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"})
        core.patch_node(node, {"spec": {"taints": taints}})
    sim.advance(10)
    job = sim.get("jobs", "gone", "team-a")
    assert job["status"]["state"]["phase"] == "Running"
    (pod,) = _pods(sim, "gone")
    assert pod["spec"]["nodeName"] != node and not pod["metadata"].get("deletionTimestamp")


def test_node_lost_fails_pods_and_pod_failed_policy_applies(sim, custom):
    create_job(
        custom,
        vcjob("lost", duration=1000, policies=[{"event": "PodFailed", "action": "AbortJob"}]),
    )
    sim.settle()
    sim.advance(3)
    sim.node_not_ready(_pods(sim, "lost")[0]["spec"]["nodeName"], mode="fail")
    sim.advance(3)
    assert phase(custom, "lost") == "Aborted"
    pod = _pods(sim, "lost")[0]
    assert pod["status"]["phase"] == "Failed" and pod["status"]["reason"] == "NodeLost"


def test_ttl_after_finished_deletes_the_job(sim, custom):
    manifest = vcjob("short-lived", duration=5)
    manifest["spec"]["ttlSecondsAfterFinished"] = 30
    create_job(custom, manifest)
    sim.settle()
    sim.advance(10)
    assert phase(custom, "short-lived") == "Completed"
    sim.advance(31)
    assert sim.get("jobs", "short-lived", "team-a") is None
    assert _pods(sim, "short-lived") == []


def test_clock_speed_lets_time_pass_without_advance():
    from kubesim import KubeSim
    from tests.kubesim.conftest import TINY

    with KubeSim(TINY, clock_speed=200, tls=False) as sim:
        sim.create(vcjob("fast", duration=60))
        assert sim.wait_for(lambda: sim.job_phase("team-a", "fast") == "Completed", timeout=5)


@pytest.mark.parametrize(
    "plugins", [{"env": [], "svc": []}, {"pytorch": ["--master=worker", "--port=29500"]}]
)
def test_plugins_inject_the_documented_environment(sim, custom, plugins):
    manifest = vcjob("dist", replicas=2)
    manifest["spec"]["plugins"] = plugins
    create_job(custom, manifest)
    sim.settle()
    pod = sim.get("pods", "dist-worker-1", "team-a")
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["VC_WORKER_HOSTS"] == "dist-worker-0.dist,dist-worker-1.dist"
    assert pod["spec"]["subdomain"] == "dist" and pod["spec"]["hostname"] == "dist-worker-1"
    if "env" in plugins:
        assert env["VC_TASK_INDEX"] == "1"
    else:
        assert env["MASTER_ADDR"] == "dist-worker-0.dist" and env["MASTER_PORT"] == "29500"


def _job_reading_a_secret(name: str, secret: str, key: str) -> dict:
    manifest = vcjob(name)
    container = manifest["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container["env"] = [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
    ]
    return manifest


def test_a_missing_secret_is_a_create_container_config_error_until_it_exists(sim, custom, core):
    create_job(custom, _job_reading_a_secret("sec", "hf-credentials", "token"))
    sim.settle()
    sim.advance(30)
    pod = core.read_namespaced_pod("sec-worker-0", "team-a")
    waiting = pod.status.container_statuses[0].state.waiting
    assert pod.status.phase == "Pending"
    assert (waiting.reason, waiting.message) == (
        "CreateContainerConfigError",
        'secret "hf-credentials" not found',
    )
    events = core.list_namespaced_event(
        "team-a", field_selector="involvedObject.name=sec-worker-0,reason=Failed"
    ).items
    assert [e.message for e in events] == ['Error: secret "hf-credentials" not found']

    core.create_namespaced_secret(
        "team-a",
        client.V1Secret(metadata=client.V1ObjectMeta(name="hf-credentials"), data={}),
    )
    sim.advance(15)
    waiting = core.read_namespaced_pod("sec-worker-0", "team-a").status.container_statuses[0]
    assert (
        waiting.state.waiting.message == "couldn't find key token in Secret team-a/hf-credentials"
    )

    core.delete_namespaced_secret("hf-credentials", "team-a")
    core.create_namespaced_secret(
        "team-a",
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="hf-credentials"), string_data={"token": "hf_x"}
        ),
    )
    stored = core.read_namespaced_secret("hf-credentials", "team-a")
    assert (stored.type, stored.data) == ("Opaque", {"token": "aGZfeA=="})
    sim.advance(15)
    assert core.read_namespaced_pod("sec-worker-0", "team-a").status.phase == "Running"


def test_a_secret_with_bad_data_is_refused_like_the_api_server_does(core):
    bad = client.V1Secret(metadata=client.V1ObjectMeta(name="s"), data={"a/b": "eA=="})
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_secret("team-a", bad)
    assert caught.value.status == 422
    assert "data[a/b]" in caught.value.body
    not_base64 = client.V1Secret(metadata=client.V1ObjectMeta(name="s"), data={"k": "%%%"})
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_secret("team-a", not_base64)
    assert "must be base64-encoded" in caught.value.body


def test_a_new_job_of_the_same_name_waits_for_the_pod_name_a_dead_node_still_holds(
    sim, custom, core, caplog
):
    """The old Job deleted in the background while its pod is Terminating on an unreachable
    node: a new Job of that name cannot have its pod (the name is taken; Volcano ignores the
    AlreadyExists) until the node returns and the old pod goes."""
    node = _resilient(sim, custom, "same")
    old = _pods(sim, "same")[0]["metadata"]["uid"]
    sim.node_not_ready(node)
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, "team-a", "jobs", "same", propagation_policy="Background"
    )
    sim.advance(5)
    assert sim.get("jobs", "same", "team-a") is None
    create_job(custom, vcjob("same", duration=1000))
    sim.advance(5)
    (pod,) = core.list_namespaced_pod("team-a", label_selector="volcano.sh/job-name=same").items
    assert pod.metadata.uid == old and pod.metadata.deletion_timestamp is not None

    sim.node_ready(node)
    sim.advance(10)
    (pod,) = core.list_namespaced_pod("team-a", label_selector="volcano.sh/job-name=same").items
    assert pod.metadata.uid != old and pod.metadata.deletion_timestamp is None
    assert pod.status.phase == "Running"
    assert sim.get("jobs", "same", "team-a")["status"]["state"]["phase"] == "Running"
    assert "simulation step failed" not in caplog.text  # no create of a taken name was tried
