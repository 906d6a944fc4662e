"""The watcher recovers by itself, fast: a restarted one takes over a killed one's streams
within seconds, and the events of a Volcano Job that ran before its dispatch was recorded are
applied as soon as it is, not at the next reconcile."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
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
