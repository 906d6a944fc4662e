"""Lost hand-offs are sent again within seconds by the re-drive, not a minute later by the
reconcile.

Each test loses a hand-off the way production does (a worker killed with SIGKILL in the middle
of a create, a worker killed while it holds a retry for its countdown, a message gone with the
broker's queue), starts a fresh worker, and then runs what beat runs every two seconds,
``clusters.redrive``, on the real clock: no clock is moved past the reconcile's minute, so the
job comes back only if the re-drive sees the loss at once. Each ends with exactly one Volcano
Job per job.
"""

from __future__ import annotations

import threading
import time

import pytest

from clusters import tasks
from portal.models import JobEvent, JobState, WorkerBeat
from rules import volcano
from tests.clusters.conftest import dispatch, state_of, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

STALL = 1.5  # a create stalled this long is in flight when the worker is killed


def _volcano_jobs(sim, job) -> list[dict]:
    return [
        o
        for o in sim.list("jobs")
        if (o["metadata"].get("labels") or {}).get(volcano.LABEL_JOB_ID) == str(job.public_id)
    ]


def _redrive_until_submitted(jobs: list, timeout: float = 20.0) -> list[str]:
    """Run the re-drive every half second, as beat would, until every job is SUBMITTED."""
    messages: list[str] = []

    def submitted() -> bool:
        messages.append(tasks.redrive_lost_handoffs())
        return all(state_of(j) == JobState.SUBMITTED for j in jobs)

    assert wait_for(submitted, timeout=timeout, interval=0.5), {j.pk: state_of(j) for j in jobs}
    return messages


def test_a_dispatch_whose_worker_is_killed_mid_create_is_sent_again_within_seconds(
    sim, cluster, admit, private_worker
):
    worker = private_worker.start()
    assert wait_for(lambda: WorkerBeat.objects.exists(), timeout=10)  # it beats
    sim.faults.add(verb="create", resource="jobs", hang=STALL, count=1)
    job = admit(cluster)
    dispatch(job)
    assert wait_for(lambda: sim.faults.count(verb="create", resource="jobs"), timeout=10)
    job.refresh_from_db()
    assert job.dispatch_owner  # the attempt names its worker
    worker.kill()
    private_worker.start()
    messages = _redrive_until_submitted([job])
    assert any("re-sent 1 dispatch" in m for m in messages), messages
    assert len(_volcano_jobs(sim, job)) == 1  # the stalled create landed: adopted, not doubled


def test_a_retry_held_by_a_killed_worker_is_sent_again_when_due(
    sim, cluster, admit, private_worker
):
    worker = private_worker.start()
    # The first create is throttled: the worker holds the retry for its countdown (3 s).
    sim.faults.add(verb="create", resource="jobs", status=429, retry_after=3, count=1)
    job = admit(cluster)
    dispatch(job)
    assert wait_for(
        lambda: JobEvent.objects.filter(job_id=job.pk, reason="DispatchRetry").exists(),
        timeout=10,
    )
    worker.kill()  # the countdown message dies with it (the broker would restore it in an hour)
    private_worker.start()
    began = time.monotonic()
    _redrive_until_submitted([job])
    retry = JobEvent.objects.get(job_id=job.pk, reason="DispatchRetry")
    submitted = JobEvent.objects.get(job_id=job.pk, reason="Submitted")
    assert (submitted.created_at - retry.created_at).total_seconds() >= 3  # Retry-After kept
    assert time.monotonic() - began < 20
    assert len(_volcano_jobs(sim, job)) == 1


def test_a_dispatch_message_lost_with_the_queue_is_sent_again(sim, cluster, admit, private_worker):
    import redis

    job = admit(cluster)
    dispatch(job)  # published, and nothing consumes it yet
    client = redis.Redis.from_url(private_worker.broker)
    try:
        assert wait_for(lambda: client.llen(private_worker.queue) == 1, timeout=5)
        client.delete(private_worker.queue)  # what a Redis restart does to it
    finally:
        client.close()
    private_worker.start()
    _redrive_until_submitted([job])
    assert len(_volcano_jobs(sim, job)) == 1


def test_the_redrive_does_not_clear_a_claim_taken_after_it_read_the_job(sim, cluster, admit):
    """The re-drive reads the admitted jobs, then stamps the lost ones as sent again. An
    attempt that claims one in between has a create in flight: clearing its claim would let
    the re-drive's message send a second create beside it, one that could beat the
    Retry-After the first is answered with. The claim is made while the re-drive's stamp
    waits for the row's lock, so the stamp sees it."""
    import datetime as dt

    from django.db import connection, transaction
    from django.utils import timezone

    from clusters.redrive import lost_handoffs_redrive
    from portal.models import Job
    from tests.clusters.test_retry_after import _in_thread, _waiting_on_locks

    job = admit(cluster)
    long_ago = timezone.now() - dt.timedelta(minutes=5)
    Job.objects.filter(pk=job.pk).update(
        dispatch_next_at=long_ago, dispatch_owner="", state_changed_at=long_ago
    )
    owner = "other-host:1:abc"
    WorkerBeat.objects.update_or_create(name=owner, defaults={"seen_at": timezone.now()})
    lease = timezone.now() + dt.timedelta(seconds=30)

    claimed = threading.Event()
    go = threading.Event()

    def claim() -> None:
        with transaction.atomic():
            Job.objects.select_for_update().get(pk=job.pk)  # the attempt's claim, in progress
            claimed.set()
            go.wait(10)
            Job.objects.filter(pk=job.pk).update(dispatch_owner=owner, dispatch_next_at=lease)

    claimer, _ = _in_thread(claim)
    assert claimed.wait(10)
    redrive, out = _in_thread(lost_handoffs_redrive, queued=0)
    assert wait_for(lambda: _waiting_on_locks() >= 1, timeout=10), "the stamp never waited"
    go.set()
    claimer.join(10)
    redrive.join(10)
    connection.close()
    assert "error" not in out, out
    job.refresh_from_db()
    assert (job.dispatch_owner, job.dispatch_next_at) == (owner, lease)
