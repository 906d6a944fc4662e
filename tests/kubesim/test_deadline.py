"""``activeDeadlineSeconds``: the kubelet fails a pod that long after its startTime."""

from __future__ import annotations

from typing import Any

from tests.kubesim.builders import create_job, phase, vcjob

DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


def _with_deadline(manifest: dict[str, Any], seconds: int) -> dict[str, Any]:
    for task in manifest["spec"]["tasks"]:
        task["template"]["spec"]["activeDeadlineSeconds"] = seconds
    return manifest


def _pod(core, name: str):
    return core.read_namespaced_pod(name, "team-a")


def test_a_pod_past_its_deadline_fails_with_deadline_exceeded(sim, custom, core):
    create_job(
        custom,
        _with_deadline(
            vcjob("slow", duration=600,
                  policies=[{"event": "PodFailed", "action": "TerminateJob"}]),
            60,
        ),
    )  # fmt: skip
    sim.settle()
    sim.advance(3)  # bound at t=0 (startTime), running from t=2
    pod = _pod(core, "slow-worker-0")
    assert pod.status.phase == "Running" and pod.status.start_time is not None
    sim.advance(56)  # t=59: one second short of the deadline
    assert _pod(core, "slow-worker-0").status.phase == "Running"
    sim.advance(1)  # t=60: the deadline counts from startTime, not from the container's start
    pod = _pod(core, "slow-worker-0")
    assert pod.status.phase == "Failed"
    assert pod.status.reason == "DeadlineExceeded"
    assert pod.status.message == DEADLINE_MESSAGE
    assert pod.status.container_statuses[0].state.terminated.exit_code == 137
    sim.advance(3)
    assert phase(custom, "slow") == "Terminated"  # Volcano saw PodFailed
    events = core.list_namespaced_event(
        "team-a", field_selector="involvedObject.name=slow-worker-0,reason=DeadlineExceeded"
    ).items
    assert [e.message for e in events] == [DEADLINE_MESSAGE]


def test_a_pod_that_never_started_still_has_a_deadline(sim, custom, core):
    """An image that cannot be pulled: the pod is Pending, but bound, so its deadline runs."""
    create_job(custom, _with_deadline(vcjob("pull", image="example.org/doesnotexist:1"), 30))
    sim.settle()
    sim.advance(10)
    assert _pod(core, "pull-worker-0").status.container_statuses[0].state.waiting.reason == (
        "ImagePullBackOff"
    )
    sim.advance(25)
    pod = _pod(core, "pull-worker-0")
    assert pod.status.phase == "Failed" and pod.status.reason == "DeadlineExceeded"
    assert phase(custom, "pull") == "Failed"  # no policy: every pod finished, none succeeded


def test_a_restart_in_place_does_not_reset_the_deadline(sim, custom, core):
    create_job(
        custom,
        _with_deadline(
            vcjob("crashy", annotations={"kubesim.gpupool.dev/exit-code": "1"}, duration=5,
                  restart_policy="OnFailure"),
            40,
        ),
    )  # fmt: skip
    sim.settle()
    sim.advance(20)
    pod = _pod(core, "crashy-worker-0")
    assert pod.status.phase == "Running" and pod.status.container_statuses[0].restart_count >= 1
    sim.advance(25)
    pod = _pod(core, "crashy-worker-0")
    assert pod.status.phase == "Failed" and pod.status.reason == "DeadlineExceeded"


def test_a_job_restart_gives_the_new_pods_a_fresh_deadline(sim, custom, core):
    create_job(
        custom,
        _with_deadline(
            vcjob("again", duration=1000, max_retry=3,
                  policies=[{"event": "PodEvicted", "action": "RestartJob"}]),
            100,
        ),
    )  # fmt: skip
    sim.settle()
    sim.advance(3)
    node = _pod(core, "again-worker-0").spec.node_name
    sim.node_not_ready(node)
    sim.advance(2)  # its pod stays Terminating: no kubelet confirms the end
    sim.delete_node(node)  # the pod GC takes it with the Node
    sim.advance(8)  # restarted, rebound elsewhere at about t=5
    assert sim.get("jobs", "again", "team-a")["status"]["retryCount"] == 1
    assert _pod(core, "again-worker-0").spec.node_name != node
    sim.advance(90)  # t=103: past the first pod's deadline, not the new one's
    assert _pod(core, "again-worker-0").status.phase == "Running"
    sim.advance(10)
    assert _pod(core, "again-worker-0").status.reason == "DeadlineExceeded"


def test_a_pod_without_a_deadline_runs_on(sim, custom, core):
    create_job(custom, vcjob("free", duration=None, command=["sleep", "infinity"]))
    sim.settle()
    sim.advance(10_000)
    assert _pod(core, "free-worker-0").status.phase == "Running"
