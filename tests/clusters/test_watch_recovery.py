"""The watcher recovers by itself, fast: a restarted one takes over a killed one's streams
within seconds and catches up with what the killed one had seen but not applied, a watch that
comes back from a frozen API server catches up too, and the events of a Volcano Job that ran
before its dispatch was recorded are applied as soon as it is, not at the next reconcile."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from clusters.dispatch import job_dispatch
from clusters.manifests import job_manifest
from clusters.models import ClusterWatch
from clusters.watch import WatchSupervisor
from portal.models import Job, JobState
from tests.clusters.conftest import (
    BACKOFF_MS,
    ROOT,
    TEST_KEYS,
    TIMEOUT_SECONDS,
    _database_url,
    vcjob_name,
    wait_for,
    wait_state,
)

pytestmark = pytest.mark.django_db(transaction=True)


# ---------------------------------------------------------------------------------------------
# A killed watcher process
# ---------------------------------------------------------------------------------------------
def _watcher(log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "GPUPOOL_SECRET_KEYS": ",".join(TEST_KEYS),
        "GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS": "true",
        "GPUPOOL_DISPATCH_BACKOFF_MS": str(BACKOFF_MS),
        "GPUPOOL_CLUSTER_TIMEOUT_SECONDS": str(TIMEOUT_SECONDS),
        "PYTHONUNBUFFERED": "1",
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "watch_clusters", "--refresh", "1"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def _holders(cluster: Any) -> set[str]:
    return set(ClusterWatch.objects.filter(cluster=cluster).values_list("holder", flat=True))


def _held_by(cluster: Any, proc: subprocess.Popen[bytes]) -> bool:
    holders = _holders(cluster)
    return (
        len(holders) == 1
        and f":{proc.pid}:" in next(iter(holders))
        and len(ClusterWatch.objects.filter(cluster=cluster)) == 3  # jobs, pods, nodes
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


def test_a_restarted_watcher_takes_over_a_killed_ones_streams_within_seconds(
    sim, cluster, admit, processes, tmp_path
):
    first = _watcher(tmp_path / "watcher.log")
    processes.append(first)
    assert wait_for(lambda: _held_by(cluster, first), timeout=30), _holders(cluster)
    os.killpg(first.pid, 9)  # SIGKILL: no lease given back
    first.wait()
    second = _watcher(tmp_path / "watcher.log")
    processes.append(second)
    # The dead one's lease (renewed every 2 s while it lived) runs out within 6 s.
    assert wait_for(lambda: _held_by(cluster, second), timeout=15), (
        _holders(cluster),
        (tmp_path / "watcher.log").read_text()[-3000:],
    )
    # And it follows them: a job started on the cluster is seen RUNNING, no reconcile run.
    job = admit(cluster)
    assert job_dispatch(job_id=job.pk).done
    sim.advance(3)
    wait_state(job, JobState.RUNNING, timeout=15)


# ---------------------------------------------------------------------------------------------
# Events before the record allows them
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def supervisor(cluster: Any) -> Iterator[WatchSupervisor]:
    stop = threading.Event()
    running = WatchSupervisor(stop=stop, refresh_seconds=1)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    yield running
    stop.set()
    for watcher in list(running.watchers.values()):
        watcher.abort()
    thread.join(timeout=15)


def test_events_of_a_job_that_ran_before_its_dispatch_was_recorded_apply_once_it_is(
    sim, cluster, admit, supervisor
):
    job = admit(cluster, command=["sh", "-c", "sleep 5"])
    # The create went through (as a worker's create that returned before its commit), and the
    # job runs to its end on the cluster while the portal still reads it ADMITTED.
    _, manifest = job_manifest(Job.objects.select_related("cluster", "gpu_model", "team").get(
        pk=job.pk))  # fmt: skip
    api = k8s_config.new_client_from_config_dict(sim.kubeconfig_dict())
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", "gpupool", "jobs", manifest
    )
    api.close()
    assert wait_for(lambda: (cluster.pk, "jobs") in supervisor.watchers, timeout=10)
    watcher = supervisor.watchers[(cluster.pk, "jobs")]
    sim.advance(3)
    sim.advance(10)
    assert wait_for(lambda: watcher._early, timeout=10)  # seen, and kept
    assert Job.objects.get(pk=job.pk).state == JobState.ADMITTED

    # The dispatch records the object (adopted: this admission made it).
    assert job_dispatch(job_id=job.pk).done
    # The kept events apply within a second or two; no reconcile runs.
    wait_state(job, JobState.SUCCEEDED, timeout=10)
    reasons = list(job.events.order_by("created_at", "id").values_list("reason", flat=True))
    assert reasons[-3:] == ["Adopted", "Running", "Succeeded"]


# ---------------------------------------------------------------------------------------------
# A watcher that takes over, or comes back from a long break, catches up by itself
# ---------------------------------------------------------------------------------------------
def _created_ahead_of_its_dispatch(sim: Any, cluster: Any, admit: Any) -> Any:
    """An ADMITTED job whose Volcano Job was created (as by a worker whose create returned
    before its commit) and ran to its end: a watcher keeps its events in memory until the
    dispatch records SUBMITTED."""
    job = admit(cluster, command=["sh", "-c", "sleep 5"])
    _, manifest = job_manifest(Job.objects.select_related("cluster", "gpu_model", "team").get(
        pk=job.pk))  # fmt: skip
    api = k8s_config.new_client_from_config_dict(sim.kubeconfig_dict())
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", "gpupool", "jobs", manifest
    )
    api.close()
    sim.advance(3)
    sim.advance(10)
    assert sim.job_phase("gpupool", vcjob_name(job)) == "Completed"
    return job


def _stored_version(cluster: Any, resource: str = "jobs") -> int:
    row = ClusterWatch.objects.filter(cluster=cluster, resource=resource).first()
    return int(row.resource_version or 0) if row else 0


def test_a_watcher_that_takes_over_a_killed_ones_stream_applies_what_it_had_kept_back(
    sim, cluster, admit, processes, tmp_path
):
    """kill -9 of ``watch_clusters`` after it saw a job end before the job's dispatch was
    recorded: it kept that event in memory and saved a version past it, so no replay brings it
    back. Its successor takes the stream over once the lease lapses, lists, and the job reads
    SUCCEEDED within seconds; no reconcile runs in these tests."""
    first = _watcher(tmp_path / "watcher.log")
    processes.append(first)
    assert wait_for(lambda: _held_by(cluster, first), timeout=30), _holders(cluster)
    job = _created_ahead_of_its_dispatch(sim, cluster, admit)
    ended = int(sim.get("jobs", vcjob_name(job), "gpupool")["metadata"]["resourceVersion"])
    # The first watcher has seen the end (and kept it) and saved a version past it.
    assert wait_for(lambda: _stored_version(cluster) >= ended, timeout=15)
    os.killpg(first.pid, 9)
    first.wait()
    assert job_dispatch(job_id=job.pk).done  # recorded SUBMITTED (adopted) while none watches
    assert Job.objects.get(pk=job.pk).state == JobState.SUBMITTED

    second = _watcher(tmp_path / "watcher.log")
    processes.append(second)
    # The lease lapses within 6 s; the catch-up is one list.
    wait_state(job, JobState.SUCCEEDED, timeout=20)
    assert _held_by(cluster, second)
    reasons = list(job.events.order_by("created_at", "id").values_list("reason", flat=True))
    assert reasons[-2:] == ["Running", "Succeeded"]


def test_a_watcher_stopped_with_events_it_could_not_apply_leaves_its_successor_a_list(
    sim, cluster, admit, watchers
):
    """A clean stop (a deploy) gives the lease back; events kept for a job still ADMITTED
    would be lost with it, so it also drops the version and the next watcher lists."""
    (first,) = watchers.start(cluster, "jobs")
    job = _created_ahead_of_its_dispatch(sim, cluster, admit)
    assert wait_for(lambda: first._early, timeout=10)  # seen, and kept in memory only
    watchers.stop()
    assert _stored_version(cluster) == 0
    assert job_dispatch(job_id=job.pk).done
    (successor,) = watchers.start(cluster, "jobs")
    wait_state(job, JobState.SUCCEEDED, timeout=10)
    assert successor.lists == 1


def test_a_frozen_api_server_that_lost_its_history_meanwhile_is_caught_up_with(
    sim, cluster, admit, watchers
):
    """The API server stops answering watches; meanwhile a Volcano Job is deleted behind the
    portal's back and the watch history is compacted. When the server answers again, the
    resume gets a 410, and the list ends the job whose object is gone at once: a relist that
    only applied the listed objects left it RUNNING until the periodic reconcile."""
    watchers.start(cluster, "jobs", timeout=1)
    job = admit(cluster)
    assert job_dispatch(job_id=job.pk).done
    sim.advance(3)
    wait_state(job, JobState.RUNNING)
    frozen = sim.faults.add(verb="watch", resource="jobs", hang=4.0, count=-1)
    assert wait_for(lambda: frozen.hits >= 1, timeout=10)  # the open watch has ended
    api = k8s_config.new_client_from_config_dict(sim.kubeconfig_dict())
    k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", "gpupool", "jobs", vcjob_name(job)
    )
    api.close()
    sim.compact()
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    sim.faults.clear()  # the server answers again
    wait_state(job, JobState.FAILED, timeout=20)
    assert job.events.filter(reason="VolcanoJobDeleted").exists()


def test_a_job_admitted_while_a_watcher_lists_is_followed(sim, cluster, admit, watchers):
    """The catch-up applies every listed object with its job read afresh: filtered through the
    followed jobs read before the list (as the reconcile reads them), a job admitted and
    created while the list ran was skipped, and the watch, started from the list's version,
    never replayed it (the event loss of 85642d3: jobs left SUBMITTED, a gang's Unschedulable
    never reported)."""
    sim.faults.add(verb="list", resource="jobs", hang=1.5, count=1)
    sim.faults.add(verb="list", resource="pods", hang=1.5, count=1)
    watchers.start(cluster)
    time.sleep(0.2)  # the watchers are past their first reads, waiting on their lists
    runs = admit(cluster)
    gang = admit(cluster, replicas=3, gpus_per_replica=8)  # two nodes have 8 GPUs
    assert job_dispatch(job_id=runs.pk).done and job_dispatch(job_id=gang.pk).done
    sim.advance(3)
    wait_state(runs, JobState.RUNNING, timeout=15)
    assert wait_for(lambda: gang.events.filter(reason="Unschedulable").exists(), timeout=15), list(
        gang.events.values_list("reason", flat=True)
    )
