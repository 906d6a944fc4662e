"""Faults lose no job and duplicate none: a worker killed mid-create, a database connection
cut between the create and the compare-and-set, a broker that is down when work is handed
over.

Each test breaks one thing at the worst moment, lets recovery happen the way production
does (a fresh worker, the periodic reconcile with its clock moved past ``STALE_AFTER``), and
then checks what a user would: the job is SUBMITTED, kubesim holds exactly one Volcano Job
for it, and its timeline shows one Submitted or Adopted transition.
"""

from __future__ import annotations

import datetime as dt
import socket

import pytest
from django.db import connection
from django.utils import timezone

from clusters import tasks
from clusters.manifests import submission_uid
from clusters.reconcile import STALE_AFTER
from clusters.tasks import cluster_reconcile_and_enqueue
from portal.models import Job, JobEvent, JobState
from rules import volcano
from tests.clusters.conftest import app_publishing_to, dispatch, state_of, wait_for, wait_state

pytestmark = pytest.mark.django_db(transaction=True)

# How long kubesim stalls a create before applying it: long enough to kill a worker or cut
# its connection mid-request, shorter than the client's timeout (2 s), so a worker left alone
# would see the create succeed.
STALL = 1.5
# The waits that include starting a worker allow 30-40 s: a Celery worker's start (Django,
# the broker, the first task) takes seconds on two loaded cores; they bound a hang, not speed.
BATCH = 4
KINDS = pytest.mark.parametrize(
    "size", [1, BATCH], ids=["one job (dispatch_job)", f"a batch of {BATCH} (dispatch_jobs)"]
)


def _later() -> dt.datetime:
    """A reconcile's clock once every message sent until now is presumed lost."""
    return timezone.now() + STALE_AFTER + dt.timedelta(seconds=5)


def _hand_over(jobs: list) -> None:
    """Publish the dispatch of ``jobs``: the one-job task for one, the batch task for more."""
    if len(jobs) == 1:
        tasks.dispatch_job.delay(jobs[0].pk)
    else:
        tasks.dispatch_jobs.delay([j.pk for j in jobs])


def _volcano_jobs(sim, job) -> list[dict]:
    return [
        o
        for o in sim.list("jobs")
        if (o["metadata"].get("labels") or {}).get(volcano.LABEL_JOB_ID) == str(job.public_id)
    ]


def _submissions(job) -> list[str]:
    """Reasons of the job's ADMITTED → SUBMITTED transitions (there must be exactly one)."""
    return list(
        JobEvent.objects.filter(
            job_id=job.pk, from_state=JobState.ADMITTED, to_state=JobState.SUBMITTED
        ).values_list("reason", flat=True)
    )


def _stalled_creates(sim) -> int:
    return sim.faults.count(verb="create", resource="jobs", kind="hang")


def _assert_one_volcano_job_each(sim, jobs: list, landed_early: set[str]) -> None:
    for job in jobs:
        assert state_of(job) == JobState.SUBMITTED
        objects = _volcano_jobs(sim, job)
        assert len(objects) == 1, [o["metadata"]["name"] for o in objects]
        # An object already there before recovery must be adopted, never doubled; a create
        # still on its way when the worker died may land before or after the fresh one.
        landed = objects[0]["metadata"]["name"] in landed_early
        assert _submissions(job) in ([["Adopted"]] if landed else [["Submitted"], ["Adopted"]])
    assert len(sim.list("jobs")) == len(jobs)


def _recover(cluster, jobs: list, timeout: float = 15.0) -> None:
    """Run the reconcile (clock past STALE_AFTER) until every job is SUBMITTED; each round
    re-enqueues what is still ADMITTED, so a retry, a redelivery or the reconcile may win."""
    assert wait_for(
        lambda: (
            cluster_reconcile_and_enqueue(cluster=cluster, now=_later()).ok
            and all(state_of(j) == JobState.SUBMITTED for j in jobs)
        ),
        timeout=timeout,
        interval=0.5,
    ), {j.pk: state_of(j) for j in jobs}


# ---------------------------------------------------------------------------------------------
# A worker killed while its create is in flight
# ---------------------------------------------------------------------------------------------
@KINDS
def test_a_worker_killed_mid_create_is_recovered_by_the_reconcile_without_a_twin(
    sim, cluster, admit, private_worker, size
):
    worker = private_worker.start()
    sim.faults.add(verb="create", resource="jobs", hang=STALL, count=size)
    jobs = [admit(cluster, name=f"killed-{i}") for i in range(size)]
    _hand_over(jobs)
    assert wait_for(lambda: _stalled_creates(sim) >= 1, timeout=30), worker.output()[-3000:]
    worker.kill()  # SIGKILL to the whole process group, mid-request: no ack, no cleanup
    sent = _stalled_creates(sim)
    # The requests already on the server are applied once their stall ends, worker or not.
    assert wait_for(lambda: len(sim.list("jobs")) >= sent, timeout=10), sim.list("jobs")
    landed_early = {o["metadata"]["name"] for o in sim.list("jobs")}
    assert {state_of(j) for j in jobs} == {JobState.ADMITTED}  # nothing lost, nothing moved

    private_worker.start()
    # The killed worker's message comes back only after the broker's visibility timeout (an
    # hour); the reconcile, its clock moved past STALE_AFTER, re-enqueues the jobs instead.
    result = cluster_reconcile_and_enqueue(cluster=cluster, now=_later())
    assert result.ok, result.message
    assert sorted(result.redispatched) == sorted(j.pk for j in jobs)
    for job in jobs:
        wait_state(job, JobState.SUBMITTED, timeout=40)
    _assert_one_volcano_job_each(sim, jobs, landed_early)


# ---------------------------------------------------------------------------------------------
# The database connection cut between the create and the compare-and-set
# ---------------------------------------------------------------------------------------------
def _terminate_backends(application_name: str) -> int:
    """What a PostgreSQL restart does to a client: its server processes go away."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            [application_name],
        )
        return int(cur.fetchone()[0])


@KINDS
def test_a_database_connection_lost_after_the_create_ends_in_adopting_the_object(
    sim, cluster, admit, private_worker, size
):
    worker = private_worker.start()
    sim.faults.add(verb="create", resource="jobs", hang=STALL, count=size)
    jobs = [admit(cluster, name=f"cut-{i}") for i in range(size)]
    _hand_over(jobs)
    # The worker has read its jobs and waits on the stalled create: its connection is open.
    assert wait_for(lambda: _stalled_creates(sim) >= 1, timeout=30), worker.output()[-3000:]
    assert _terminate_backends(worker.app_name) >= 1
    # The creates succeed on the cluster; the worker's next statement finds its connection
    # gone, so nothing records them.
    assert wait_for(lambda: len(sim.list("jobs")) == size, timeout=10), sim.list("jobs")
    _recover(cluster, jobs)
    for job in jobs:
        objects = _volcano_jobs(sim, job)
        assert len(objects) == 1
        # Adopted because the object carries this admission's submission UID.
        assert _submissions(job) == ["Adopted"], worker.output()[-3000:]
        annotations = objects[0]["metadata"]["annotations"]
        assert annotations[volcano.ANNOTATION_SUBMISSION_UID] == submission_uid(
            Job.objects.get(pk=job.pk)
        )
    assert len(sim.list("jobs")) == size


# ---------------------------------------------------------------------------------------------
# The broker down when the admission is handed over
# ---------------------------------------------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_dispatch_that_cannot_be_enqueued_stays_admitted_and_the_reconcile_submits_it(
    sim, cluster, admit, celery_worker
):
    job = admit(cluster)
    unreachable = f"redis://127.0.0.1:{_closed_port()}/0"
    with app_publishing_to(unreachable, celery_worker.queue):
        dispatch(job)  # the scheduling cycle's hook: it must neither raise nor lose the job
    # Nothing reached the (live) worker: the job waits, ADMITTED, with nothing on the cluster.
    assert not wait_for(lambda: state_of(job) != JobState.ADMITTED, timeout=1.0)
    assert _volcano_jobs(sim, job) == []

    # The broker is back (this process publishes to the worker's again); the reconcile finds
    # the job still ADMITTED long after its admission and enqueues it anew.
    result = cluster_reconcile_and_enqueue(cluster=cluster, now=_later())
    assert result.redispatched == [job.pk]
    wait_state(job, JobState.SUBMITTED)
    assert len(_volcano_jobs(sim, job)) == 1
    assert _submissions(job) == ["Submitted"]
