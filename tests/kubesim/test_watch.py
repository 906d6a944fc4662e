"""Watches as ``kubernetes.watch.Watch`` consumes them: events, resume, bookmarks, 410."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from tests.kubesim.builders import GROUP, SCHED, VERSION, create_job, vcjob
from tests.kubesim.conftest import raw


def _collect(stream, until=None) -> list[dict]:
    """Events until ``until(events)`` holds (or the server ends the stream)."""
    events = []
    for event in stream:
        events.append(event)
        if until is not None and until(events):
            stream.close()
            break
    return events


def _phase(event: dict) -> str:
    return event["raw_object"].get("status", {}).get("state", {}).get("phase", "")


def test_watch_nodes_without_version_starts_with_the_current_state(core):
    started = time.monotonic()
    events = _collect(watch.Watch().stream(core.list_node, timeout_seconds=1))
    assert [e["type"] for e in events] == ["ADDED"] * 3
    assert events[0]["object"].metadata.name.startswith("a100-")
    assert 0.8 < time.monotonic() - started < 5  # the server ends the stream at timeoutSeconds


def test_watch_pods_from_a_listed_version_sees_the_job_lifecycle(sim, core, custom):
    listed = core.list_namespaced_pod("team-a")
    create_job(custom, vcjob("train-1", duration=30))
    sim.settle()
    sim.advance(40)
    events = _collect(
        watch.Watch().stream(
            core.list_namespaced_pod,
            "team-a",
            resource_version=listed.metadata.resource_version,
            label_selector="volcano.sh/job-name=train-1",
            timeout_seconds=5,
        ),
        until=lambda evs: evs[-1]["object"].status.phase == "Succeeded",
    )
    kinds = [(e["type"], e["object"].status.phase) for e in events]
    assert kinds[0] == ("ADDED", "Pending")
    assert ("MODIFIED", "Running") in kinds
    assert kinds[-1] == ("MODIFIED", "Succeeded")
    versions = [int(e["object"].metadata.resource_version) for e in events]
    assert versions == sorted(versions)


def test_watch_namespaced_and_cluster_custom_objects(sim, custom):
    start = custom.list_namespaced_custom_object(GROUP, VERSION, "team-a", "jobs")
    rv = start["metadata"]["resourceVersion"]
    create_job(custom, vcjob("train-1"))
    create_job(custom, vcjob("train-2", namespace="team-b", queue="team-b"))
    sim.settle()
    namespaced = _collect(
        watch.Watch().stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "team-a",
            "jobs",
            resource_version=rv,
            timeout_seconds=5,
        ),
        until=lambda evs: _phase(evs[-1]) == "Pending",
    )
    assert {e["object"]["metadata"]["name"] for e in namespaced} == {"train-1"}
    assert namespaced[0]["type"] == "ADDED"
    assert any(
        e["object"].get("status", {}).get("state", {}).get("phase") == "Pending" for e in namespaced
    )
    everywhere = _collect(
        watch.Watch().stream(
            custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            "jobs",
            resource_version=rv,
            timeout_seconds=5,
        ),
        until=lambda evs: (
            {e["raw_object"]["metadata"]["name"] for e in evs if _phase(e)}
            == {"train-1", "train-2"}
        ),
    )
    assert {e["object"]["metadata"]["name"] for e in everywhere} == {"train-1", "train-2"}
    queues = _collect(
        watch.Watch().stream(
            custom.list_cluster_custom_object, SCHED, "v1beta1", "queues", timeout_seconds=5
        ),
        until=lambda evs: len(evs) == 4,
    )
    assert {"default", "team-a"} <= {e["object"]["metadata"]["name"] for e in queues}


def test_live_events_arrive_while_the_stream_is_open(sim, core, custom):
    got: list[tuple[str, str]] = []
    done = threading.Event()
    w = watch.Watch()

    def consume() -> None:
        for event in w.stream(core.list_namespaced_pod, "team-a", timeout_seconds=5):
            got.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                w.stop()
        done.set()

    thread = threading.Thread(target=consume)
    thread.start()
    time.sleep(0.3)
    create_job(custom, vcjob("train-1", duration=1000))
    sim.settle()
    sim.advance(3)
    core.delete_namespaced_pod("train-1-worker-0", "team-a", grace_period_seconds=0)
    assert done.wait(5)
    thread.join()
    assert got[0] == ("ADDED", "train-1-worker-0")
    assert ("DELETED", "train-1-worker-0") in got


def test_bookmarks_carry_the_current_resource_version(sim, core):
    events = _collect(
        watch.Watch().stream(
            core.list_node,
            allow_watch_bookmarks=True,
            timeout_seconds=5,
            resource_version=str(sim.store.rv),
        ),
        until=lambda evs: evs[-1]["type"] == "BOOKMARK",
    )
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks
    assert bookmarks[-1]["raw_object"]["metadata"]["resourceVersion"] == str(sim.store.rv)
    assert bookmarks[-1]["raw_object"]["kind"] == "Node"


def test_watch_from_a_compacted_version_is_410_gone(sim, core, custom):
    old = core.list_namespaced_pod("team-a").metadata.resource_version
    create_job(custom, vcjob("train-1"))
    sim.settle()
    sim.compact()
    with pytest.raises(ApiException) as excinfo:
        _collect(
            watch.Watch().stream(
                core.list_namespaced_pod, "team-a", resource_version=old, timeout_seconds=1
            )
        )
    assert excinfo.value.status == 410
    assert "too old resource version" in excinfo.value.reason
    status, _, body = raw(
        sim, "GET", f"/api/v1/namespaces/team-a/pods?watch=1&resourceVersion={old}&timeoutSeconds=1"
    )
    assert status == 200  # as the apiserver does: the 410 arrives as a watch ERROR event
    event = body if isinstance(body, dict) else json.loads(body.splitlines()[0])
    assert event["type"] == "ERROR"
    assert (event["object"]["kind"], event["object"]["code"]) == ("Status", 410)
    assert event["object"]["reason"] == "Expired"
    fresh = core.list_namespaced_pod("team-a").metadata.resource_version
    events = _collect(
        watch.Watch().stream(
            core.list_namespaced_pod, "team-a", resource_version=fresh, timeout_seconds=1
        )
    )
    assert events == []  # a relist recovers


def test_history_window_expires_old_versions(sim, core):
    sim.store.collection(sim.types.nodes).history_size = 2
    first = core.list_node().metadata.resource_version
    for index in range(3):
        core.patch_node("a100-0", {"metadata": {"labels": {"round": str(index)}}})
    with pytest.raises(ApiException) as excinfo:
        _collect(watch.Watch().stream(core.list_node, resource_version=first, timeout_seconds=1))
    assert excinfo.value.status == 410


def test_resume_from_the_last_seen_version_gets_only_newer_events(sim, core):
    start = core.list_node().metadata.resource_version
    core.patch_node("a100-0", {"metadata": {"labels": {"a": "1"}}})
    core.patch_node("a100-1", {"metadata": {"labels": {"a": "2"}}})
    first = _collect(
        watch.Watch().stream(core.list_node, resource_version=start, timeout_seconds=5),
        until=lambda evs: len(evs) == 2,
    )
    assert [e["object"].metadata.name for e in first] == ["a100-0", "a100-1"]
    resumed = _collect(
        watch.Watch().stream(
            core.list_node,
            resource_version=first[0]["object"].metadata.resource_version,
            timeout_seconds=5,
        ),
        until=lambda evs: len(evs) == 1,
    )
    assert [e["object"].metadata.name for e in resumed] == ["a100-1"]


def test_an_object_leaving_the_selector_is_seen_as_deleted(sim, core):
    start = core.list_node().metadata.resource_version
    core.patch_node("a100-0", {"metadata": {"labels": {"pool": "blue"}}})
    core.patch_node("a100-0", {"metadata": {"labels": {"pool": "green"}}})
    events = _collect(
        watch.Watch().stream(
            core.list_node, label_selector="pool=blue", resource_version=start, timeout_seconds=5
        ),
        until=lambda evs: evs[-1]["type"] == "DELETED",
    )
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]


def test_forced_410_is_retried_once_by_the_client_and_counted(sim, core):
    start = core.list_node().metadata.resource_version
    core.patch_node("a100-0", {"metadata": {"labels": {"a": "1"}}})
    sim.faults.expire_next_watch(resource="nodes")
    w = watch.Watch()
    # Without timeout_seconds the client silently re-watches once after a 410 ERROR event.
    for event in w.stream(core.list_node, resource_version=start):
        assert (event["type"], event["object"].metadata.name) == ("MODIFIED", "a100-0")
        w.stop()
    assert sim.faults.count(kind="gone") == 1


def test_forced_410_with_a_timeout_reaches_the_caller(sim, core):
    sim.faults.expire_next_watch(resource="nodes")
    with pytest.raises(ApiException) as excinfo:
        _collect(watch.Watch().stream(core.list_node, timeout_seconds=1))
    assert excinfo.value.status == 410
    assert sim.faults.count(kind="gone", resource="nodes") == 1


def test_dropped_and_duplicated_events_are_injected_and_counted(sim, core):
    start = core.list_node().metadata.resource_version
    for index in range(3):
        core.patch_node("a100-0", {"metadata": {"labels": {"round": str(index)}}})
    sim.faults.drop_watch_events(resource="nodes", count=1)
    last = lambda evs: evs[-1]["object"].metadata.labels["round"] == "2"  # noqa: E731
    dropped = _collect(
        watch.Watch().stream(core.list_node, resource_version=start, timeout_seconds=5), until=last
    )
    assert [e["object"].metadata.labels["round"] for e in dropped] == ["1", "2"]
    sim.faults.duplicate_watch_events(resource="nodes", count=1)
    doubled = _collect(
        watch.Watch().stream(core.list_node, resource_version=start, timeout_seconds=5), until=last
    )
    assert [e["object"].metadata.labels["round"] for e in doubled] == ["0", "0", "1", "2"]
    assert sim.faults.count(kind="drop") == 1
    assert sim.faults.count(kind="duplicate") == 1


def test_stopping_the_server_ends_open_watches(sim, core):
    finished = threading.Event()

    def consume() -> None:
        try:
            for _ in watch.Watch().stream(core.list_node, timeout_seconds=30):
                pass
        except Exception:
            pass
        finished.set()

    threading.Thread(target=consume, daemon=True).start()
    assert sim.wait_for(lambda: sim.stats()["watchers"] == 1, timeout=10)
    sim.stop()
    assert finished.wait(5)
