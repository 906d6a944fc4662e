"""A dispatch batch whose database transaction fails mid-batch, on the real PostgreSQL.

The batch claims its jobs on their rows (a worker and a lease) before it creates their Volcano
Jobs. A deadlock in its last transaction is retried at once; any other database error gives
the claims back and hands the jobs to the one-job path, instead of leaving them held until the
lease runs out. Another connection (a thread) holds job rows locked to make the error real.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from clusters.dispatch import job_dispatch, job_dispatch_batch
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
