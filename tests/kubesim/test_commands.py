"""Volcano Commands: the bus.volcano.sh resource, the queue and job actions, and validation."""

from __future__ import annotations

import json

import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

from tests.kubesim.builders import BUS, command, create_command, create_job, phase, vcjob
from tests.kubesim.conftest import raw


def _uid(sim, kind: str, name: str, namespace: str | None = None) -> str:
    return sim.get(kind, name, namespace)["metadata"]["uid"]


def _close(custom, sim, queue: str, name: str = "close-1") -> None:
    uid = _uid(sim, "queues", queue)
    create_command(custom, command(name, "CloseQueue", target=queue, kind="Queue", uid=uid))
    sim.settle()


def _open(custom, sim, queue: str, name: str = "open-1") -> None:
    uid = _uid(sim, "queues", queue)
    create_command(custom, command(name, "OpenQueue", target=queue, kind="Queue", uid=uid))
    sim.settle()


def _state(sim, queue: str) -> str:
    return sim.get("queues", queue)["status"]["state"]


def _job_command(custom, sim, job: str, action: str, name: str | None = None) -> None:
    uid = _uid(sim, "jobs", job, "team-a")
    create_command(custom, command(name or f"{job}-{action.lower()}", action, target=job, uid=uid))
    sim.settle()


def _error(excinfo) -> dict:
    return json.loads(excinfo.value.body)


# -- the resource ------------------------------------------------------------------------------
def test_commands_are_created_read_listed_and_deleted_like_other_custom_objects(sim, custom):
    sim.pause()  # the controllers would consume the Command at once
    created = create_command(custom, command("c-1", "AbortJob", target="nothing"))
    assert created["metadata"]["uid"] and created["action"] == "AbortJob"
    got = custom.get_namespaced_custom_object(BUS, "v1alpha1", "team-a", "commands", "c-1")
    assert got["target"]["name"] == "nothing"
    listed = custom.list_namespaced_custom_object(BUS, "v1alpha1", "team-a", "commands")
    assert [c["metadata"]["name"] for c in listed["items"]] == ["c-1"]
    assert listed["kind"] == "CommandList"
    everywhere = custom.list_cluster_custom_object(BUS, "v1alpha1", "commands")
    assert len(everywhere["items"]) == 1
    custom.delete_namespaced_custom_object(BUS, "v1alpha1", "team-a", "commands", "c-1")
    assert sim.list("commands") == []


def test_a_consumed_command_is_seen_added_then_deleted_by_a_watch(sim, custom):
    sim.pause()
    create_command(custom, command("c-1", "AbortJob", target="nothing"))
    listed = custom.list_namespaced_custom_object(BUS, "v1alpha1", "team-a", "commands")
    sim.resume()
    sim.settle()
    stream = watch.Watch().stream(
        custom.list_namespaced_custom_object,
        BUS,
        "v1alpha1",
        "team-a",
        "commands",
        resource_version=listed["metadata"]["resourceVersion"],
        timeout_seconds=1,
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in stream] == [("DELETED", "c-1")]


def test_discovery_lists_commands_as_namespaced_with_every_verb(sim):
    status, _, body = raw(sim, "GET", "/apis/bus.volcano.sh/v1alpha1")
    assert status == 200
    (resource,) = [r for r in body["resources"] if r["name"] == "commands"]
    assert resource["kind"] == "Command" and resource["namespaced"] is True
    assert {"create", "get", "list", "watch", "delete"} <= set(resource["verbs"])


def test_a_command_for_a_target_that_does_not_exist_is_consumed_and_does_nothing(sim, custom):
    create_command(custom, command("c-1", "CloseQueue", target="no-such", kind="Queue"))
    create_command(custom, command("c-2", "AbortJob", target="no-such"))
    sim.settle()
    assert sim.list("commands") == []


# -- queue actions -----------------------------------------------------------------------------
def test_close_queue_on_an_idle_queue_closes_it_and_open_queue_reopens_it(sim, custom):
    _close(custom, sim, "team-b")
    assert _state(sim, "team-b") == "Closed"
    assert sim.list("commands") == []
    _open(custom, sim, "team-b")
    assert _state(sim, "team-b") == "Open"
    reasons = [(e["reason"], e["message"]) for e in sim.events(involved="team-b")]
    assert reasons == [("CloseQueue", "Close queue succeed"), ("OpenQueue", "Open queue succeed")]


def test_a_queue_with_pod_groups_is_closing_until_the_last_one_is_deleted(sim, custom):
    create_job(custom, vcjob("train", duration=60))
    sim.advance(5)
    _close(custom, sim, "team-a")
    assert _state(sim, "team-a") == "Closing"
    assert phase(custom, "train") == "Running"  # what runs keeps running
    sim.advance(60)
    assert phase(custom, "train") == "Completed"
    assert _state(sim, "team-a") == "Closing"  # a finished job's PodGroup still counts
    custom.delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", "team-a", "jobs", "train"
    )
    sim.settle()
    assert _state(sim, "team-a") == "Closed"


def test_closing_twice_or_opening_an_open_queue_changes_nothing(sim, custom):
    _open(custom, sim, "team-b", name="open-early")
    _close(custom, sim, "team-b")
    version = sim.get("queues", "team-b")["metadata"]["resourceVersion"]
    _close(custom, sim, "team-b", name="close-2")
    assert sim.get("queues", "team-b")["metadata"]["resourceVersion"] == version
    assert [e["reason"] for e in sim.events(involved="team-b")] == ["CloseQueue"]


def test_a_closing_queue_refuses_new_jobs_with_volcanos_message(sim, custom):
    create_job(custom, vcjob("train", duration=60))
    sim.settle()
    _close(custom, sim, "team-a")
    with pytest.raises(ApiException) as excinfo:
        create_job(custom, vcjob("late"))
    assert excinfo.value.status == 400
    assert (
        'admission webhook "validatejob.volcano.sh" denied the request: can only submit job to '
        "queue with state `Open`, queue `team-a` status is `Closing`"
    ) in _error(excinfo)["message"]


def test_a_gang_enqueued_before_the_queue_closed_is_not_allocated_until_it_reopens(sim, custom):
    for node in ("a100-0", "a100-1", "a100-2"):
        sim.cordon(node)
    create_job(custom, vcjob("train", duration=60))
    sim.settle()
    assert sim.podgroup("team-a", "train")["status"]["phase"] == "Inqueue"
    _close(custom, sim, "team-a")
    for node in ("a100-0", "a100-1", "a100-2"):
        sim.uncordon(node)
    sim.settle()
    (pod,) = sim.job_pods("team-a", "train")
    assert not pod["spec"].get("nodeName")
    conditions = sim.podgroup("team-a", "train")["status"]["conditions"]
    assert 'queue "team-a" is Closing; only Open queues are allocated' in conditions[0]["message"]
    _open(custom, sim, "team-a")
    (pod,) = sim.job_pods("team-a", "train")
    assert pod["spec"].get("nodeName")


def test_the_python_api_and_the_control_endpoint_close_as_a_command_does(sim, custom):
    create_job(custom, vcjob("train", duration=60))
    sim.settle()
    sim.close_queue("team-a")
    assert _state(sim, "team-a") == "Closing"
    status, _, body = raw(sim, "POST", "/kubesim/v1/queues/team-b/close")
    assert (status, body) == (200, {"queue": "team-b", "state": "Closed"})
    status, _, body = raw(sim, "POST", "/kubesim/v1/queues/no-such/close")
    assert status == 404


# -- job actions -------------------------------------------------------------------------------
def test_abort_job_aborts_and_resume_job_runs_it_again(sim, custom):
    create_job(custom, vcjob("train", replicas=2, duration=60))
    sim.advance(5)
    _job_command(custom, sim, "train", "AbortJob")
    assert phase(custom, "train") == "Aborting"
    sim.advance(2)
    assert phase(custom, "train") == "Aborted"
    assert sim.job_pods("team-a", "train") == []
    _job_command(custom, sim, "train", "ResumeJob")
    sim.advance(5)
    status = sim.get("jobs", "train", "team-a")["status"]
    assert status["state"]["phase"] == "Running"
    assert (status["retryCount"], status["version"]) == (1, 1)
    events = [e["message"] for e in sim.events("team-a", involved="train")]
    assert (
        "Start to execute command AbortJob, and clean it up to make sure executed not more "
        "than once." in events
    )
    assert sim.list("commands") == []


@pytest.mark.parametrize(
    ("action", "then", "final"),
    [
        ("TerminateJob", "Terminating", "Terminated"),
        ("CompleteJob", "Completing", "Completed"),
        ("RestartJob", "Restarting", "Running"),
    ],
    ids=["terminate", "complete", "restart"],
)
def test_job_actions_move_a_running_job_as_volcano_does(sim, custom, action, then, final):
    create_job(custom, vcjob("train", replicas=2, duration=60))
    sim.advance(5)
    _job_command(custom, sim, "train", action)
    assert phase(custom, "train") == then
    sim.advance(10)
    assert phase(custom, "train") == final
    retries = sim.get("jobs", "train", "team-a")["status"]["retryCount"]
    assert retries == (1 if action == "RestartJob" else 0)


def test_an_action_that_does_not_apply_to_the_phase_is_dropped(sim, custom):
    create_job(custom, vcjob("train", duration=60))
    sim.advance(5)
    _job_command(custom, sim, "train", "ResumeJob")  # only an aborted job resumes
    assert phase(custom, "train") == "Running"
    assert sim.list("commands") == []


# -- validation --------------------------------------------------------------------------------
def _queue_target(**override):
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "name": "team-a",
        "uid": "0",
        **override,
    }


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [
        ({"target": _queue_target()}, "action", "action: Required value"),
        (
            {"action": "Shutdown", "target": _queue_target()},
            "action",
            'action: Unsupported value: "Shutdown": supported values: "AbortJob", ',
        ),
        (
            {"action": "AbortJob", "target": _queue_target()},
            "action",
            'action: Invalid value: "AbortJob": AbortJob applies to a target of kind Job '
            "(batch.volcano.sh/v1alpha1), not Queue",
        ),
        ({"action": "CloseQueue"}, "target", "target: Required value"),
        (
            {"action": "CloseQueue", "target": {"apiVersion": "v1", "kind": "Queue", "name": "x"}},
            "target.uid",
            "target.uid: Required value",
        ),
        (
            {"action": "CloseQueue", "target": _queue_target(apiVersion="scheduling/v1")},
            "target.apiVersion",
            'target.apiVersion: Unsupported value: "scheduling/v1": supported values: '
            '"scheduling.volcano.sh/v1beta1"',
        ),
        (
            {"action": "AbortJob", "target": _queue_target(apiVersion="v1", kind="Pod")},
            "target.kind",
            'target.kind: Unsupported value: "Pod": supported values: "Job", "Queue"',
        ),
        (
            {"action": 3, "target": _queue_target()},
            "action",
            'action: Invalid value: "integer": action in body must be of type string',
        ),
    ],
    ids=[
        "no action",
        "unknown action",
        "job action on a queue",
        "no target",
        "target without uid",
        "queue of the wrong version",
        "target neither job nor queue",
        "action not a string",
    ],
)
def test_bad_commands_are_invalid_naming_the_field(sim, body, field, text):
    manifest = {
        "apiVersion": "bus.volcano.sh/v1alpha1",
        "kind": "Command",
        "metadata": {"name": "bad"},
        **body,
    }
    status, _, answer = raw(
        sim, "POST", "/apis/bus.volcano.sh/v1alpha1/namespaces/team-a/commands", manifest
    )
    assert (status, answer["reason"]) == (422, "Invalid")
    assert answer["message"].startswith('Command.bus.volcano.sh "bad" is invalid: ')
    assert text in answer["message"]
    assert field in [c["field"] for c in answer["details"]["causes"]]
    assert sim.list("commands") == []


def test_strict_field_validation_refuses_a_spec(sim, custom):
    manifest = command("c-1", "CloseQueue", target="team-a", kind="Queue")
    manifest["spec"] = {"action": "CloseQueue"}
    with pytest.raises(ApiException) as excinfo:
        create_command(custom, manifest, field_validation="Strict")
    assert excinfo.value.status == 400
    assert 'strict decoding error: unknown field "spec"' in _error(excinfo)["message"]
