"""A dispatch whose database fails mid-way, on the real PostgreSQL.

A dispatch claims its jobs on their rows (a worker and a lease) before it creates their Volcano
Jobs. A deadlock in a batch's last transaction is retried at once; any other database error
gives the claims back (a batch hands its jobs to the one-job path, the one-job path asks for a
retry), instead of leaving them held until the lease runs out. Another connection (a thread)
makes the error real: it holds job rows locked, or ends the dispatch's connection as a restart
of PostgreSQL does.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection, transaction
from django.utils import timezone

from clusters.dispatch import job_dispatch, job_dispatch_batch
from clusters.redrive import GRACE, lost_handoffs_redrive
from portal import workers
from portal.models import Job, JobEvent, JobState
from tests.clusters.conftest import wait_for

LOCK_TIMEOUT = 0.5  # seconds

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="row locks: PostgreSQL only"),
]


@pytest.fixture(autouse=True)
def _a_worker_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claims carry the worker's name; outside a Celery worker it is empty (no claim shows)."""
    monkeypatch.setattr(workers, "_name", workers.worker_name())
    workers.worker_name_set("batch-test")


def _holder(job_ids: list[int], then: Callable[[], None]) -> tuple[threading.Thread, list]:
    """A thread that waits for the batch's claim on ``job_ids[-1]``, then locks that row (``NO
    KEY UPDATE``, as an update would) in a transaction of its own connection and, once the
    batch waits for it, runs ``then`` before it lets go. Returns the thread and a list of what
    it raised."""
    errors: list[BaseException] = []

    def hold() -> None:
        try:
            claimed = Job.objects.filter(pk=job_ids[-1]).exclude(dispatch_owner="")
            assert wait_for(claimed.exists, timeout=20), "the batch never claimed its jobs"
            with transaction.atomic():
                list(Job.objects.select_for_update(no_key=True).filter(pk=job_ids[-1]))
                assert wait_for(_someone_waits_for_a_row, timeout=20), "the batch never waited"
                then()
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    return thread, errors


def _someone_waits_for_a_row() -> bool:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return bool(cur.fetchone()[0])


def test_a_deadlock_in_the_batchs_transaction_is_retried_at_once(sim, cluster, admit, caplog):
    """The holder locks the last job, waits until the batch's compare-and-set waits for it,
    then reaches for the first job, which the batch holds: PostgreSQL kills the batch's
    transaction (its wait began first). The batch runs it again and every job is SUBMITTED
    with one event, no job handed to the one-job path."""
    sim.faults.add(verb="create", resource="jobs", hang=1.0, count=-1)
    ids = sorted(admit(cluster, name=f"deadlocked-{i}").pk for i in range(4))

    def reach_for_the_first() -> None:
        list(Job.objects.select_for_update(no_key=True).filter(pk=ids[0]))

    holder, errors = _holder(ids, reach_for_the_first)
    with caplog.at_level(logging.WARNING, logger="portal.jobs.rowlock"):
        outcome = job_dispatch_batch(job_ids=ids)
    holder.join(timeout=30)
    assert not errors, errors
    assert "deadlock detected" in caplog.text, "the batch did not lose the deadlock"
    assert outcome.later == {}
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {
        JobState.SUBMITTED
    }
    for pk in ids:
        assert JobEvent.objects.filter(job_id=pk, to_state=JobState.SUBMITTED).count() == 1
    assert len(sim.list("jobs", "gpupool")) == 4


def test_a_database_error_after_the_claim_gives_the_claims_back_at_once(sim, cluster, admit):
    """The batch's last transaction waits for a row the holder keeps locked past the batch's
    ``lock_timeout``: it fails, and that is no deadlock, so no retry. The claims are given back
    (the holder lets go a moment later), every job is handed to the one-job path with no wait,
    and that path adopts the Volcano Jobs the batch created (409, same submission UID)."""
    sim.faults.add(verb="create", resource="jobs", hang=1.0, count=4)
    ids = sorted(admit(cluster, name=f"timed-out-{i}").pk for i in range(4))
    holder, errors = _holder(ids, lambda: time.sleep(LOCK_TIMEOUT + 0.1))
    try:
        with connection.cursor() as cur:
            cur.execute("SET lock_timeout = %s", [f"{int(LOCK_TIMEOUT * 1000)}ms"])
        outcome = job_dispatch_batch(job_ids=ids)
    finally:
        holder.join(timeout=30)
        with connection.cursor() as cur:
            cur.execute("RESET lock_timeout")
    assert not errors, errors
    assert outcome.later == dict.fromkeys(ids, 0.0)
    rows = Job.objects.filter(pk__in=ids).values_list("state", "dispatch_owner")
    assert set(rows) == {(JobState.ADMITTED, "")}, "a claim was left to its lease"
    assert len(sim.list("jobs", "gpupool")) == 4  # created, never recorded
    for pk in ids:
        assert job_dispatch(job_id=pk).done
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {
        JobState.SUBMITTED
    }
    assert JobEvent.objects.filter(job_id__in=ids, reason="Adopted").count() == 4
    assert len(sim.list("jobs", "gpupool")) == 4


def _backend_pid() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return int(cur.fetchone()[0])


def _terminator(pid: int, when: Callable[[], bool]) -> tuple[threading.Thread, list]:
    """A thread that, once ``when`` holds, ends the PostgreSQL backend ``pid`` from its own
    connection, as a restart of PostgreSQL ends every connection. Returns the thread and a list
    of what it raised."""
    errors: list[BaseException] = []

    def terminate() -> None:
        try:
            assert wait_for(when, timeout=20), "the moment to cut the connection never came"
            with connection.cursor() as cur:
                cur.execute("SELECT pg_terminate_backend(%s)", [pid])
                assert cur.fetchone()[0], "the backend was not there to terminate"
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=terminate)
    thread.start()
    return thread, errors


def test_a_lost_connection_gives_the_one_job_claim_back_at_once(sim, cluster, admit):
    """PostgreSQL goes away while a one-job dispatch's create is in flight: the create reaches
    the cluster, and the record that follows fails on the dead connection. The worker still
    beats, so only the attempt itself can free its claim before the lease (3 × the cluster
    timeout + 5 s) runs out. It gives the claim back on a fresh connection, keeps its count of
    a create that may have gone through, and asks for a retry within a second; the re-drive
    would send the job a few seconds later too. The retry adopts the object (409, same
    submission UID): one Volcano Job, one SUBMITTED."""
    sim.faults.add(verb="create", resource="jobs", hang=1.0)
    job = admit(cluster, name="cut-off")
    workers._beat()  # this worker is alive: nothing takes its claim over
    pid = _backend_pid()
    create_in_flight = lambda: sim.faults.count(verb="create", resource="jobs") >= 1  # noqa: E731
    terminator, errors = _terminator(pid, create_in_flight)
    try:
        outcome = job_dispatch(job_id=job.pk)
    finally:
        terminator.join(timeout=30)
        connection.close()  # as a task's end does (the test goes on, whatever happened)
    assert not errors, errors
    assert not outcome.done and outcome.retry_in is not None and outcome.retry_in <= 1.0
    row = Job.objects.get(pk=job.pk)
    assert (row.state, row.dispatch_owner) == (JobState.ADMITTED, ""), "claim left to its lease"
    assert row.dispatch_next_at <= timezone.now() + dt.timedelta(seconds=1)
    assert row.creates_unsure == 1, "a create that reached the cluster was taken back"
    assert len(sim.list("jobs", "gpupool")) == 1  # created, never recorded

    soon = timezone.now() + GRACE + dt.timedelta(seconds=2)
    assert lost_handoffs_redrive(queued=0, now=soon).dispatch == [job.pk]
    assert job_dispatch(job_id=job.pk).done
    row.refresh_from_db()
    assert row.state == JobState.SUBMITTED
    assert JobEvent.objects.filter(job_id=job.pk, reason="Adopted").count() == 1
    assert len(sim.list("jobs", "gpupool")) == 1


def test_a_lost_connection_gives_the_batchs_claims_back_at_once(sim, cluster, admit):
    """The same loss in a batch, while its creates hang: the transaction that records them
    fails on the dead connection, the claims are given back on a fresh one (the dead one
    refuses every statement), and every job goes to the one-job path, which adopts."""
    sim.faults.add(verb="create", resource="jobs", hang=1.0, count=3)
    ids = sorted(admit(cluster, name=f"cut-off-{i}").pk for i in range(3))
    workers._beat()
    pid = _backend_pid()
    create_in_flight = lambda: sim.faults.count(verb="create", resource="jobs") >= 3  # noqa: E731
    terminator, errors = _terminator(pid, create_in_flight)
    try:
        outcome = job_dispatch_batch(job_ids=ids)
    finally:
        terminator.join(timeout=30)
        connection.close()
    assert not errors, errors
    assert outcome.later == dict.fromkeys(ids, 0.0)
    rows = Job.objects.filter(pk__in=ids).values_list("state", "dispatch_owner", "creates_unsure")
    assert set(rows) == {(JobState.ADMITTED, "", 1)}, "a claim was left to its lease"
    for pk in ids:
        assert job_dispatch(job_id=pk).done
    assert JobEvent.objects.filter(job_id__in=ids, reason="Adopted").count() == 3
    assert len(sim.list("jobs", "gpupool")) == 3


def test_a_claim_the_database_refuses_at_first_is_given_back_when_it_answers(sim, cluster, admit):
    """The one-job path's compare-and-set waits for a row the holder keeps locked past the
    ``lock_timeout``, twice over: the transition fails, and so does the first try to give the
    claim back. The next try, once the holder let go, gives it back; the retry adopts."""
    sim.faults.add(verb="create", resource="jobs", hang=0.3)
    job = admit(cluster, name="held")
    workers._beat()
    holder, errors = _holder([job.pk], lambda: time.sleep(2 * LOCK_TIMEOUT + 0.2))
    try:
        with connection.cursor() as cur:
            cur.execute("SET lock_timeout = %s", [f"{int(LOCK_TIMEOUT * 1000)}ms"])
        outcome = job_dispatch(job_id=job.pk)
    finally:
        holder.join(timeout=30)
        with connection.cursor() as cur:
            cur.execute("RESET lock_timeout")
    assert not errors, errors
    assert not outcome.done and outcome.retry_in is not None
    row = Job.objects.get(pk=job.pk)
    assert (row.state, row.dispatch_owner, row.creates_unsure) == (JobState.ADMITTED, "", 1)
    assert job_dispatch(job_id=job.pk).done
    assert JobEvent.objects.filter(job_id=job.pk, reason="Adopted").count() == 1
    assert len(sim.list("jobs", "gpupool")) == 1
