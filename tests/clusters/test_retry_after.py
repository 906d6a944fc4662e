"""A cluster's Retry-After holds back every create of the job it refused, whenever the hand-off
that sends it loaded the job, and the soak measures it on the refusals that were 429s.

Real kubesim, real PostgreSQL; the interleavings are made with the database's own row locks
and kubesim's stalls, never by replacing a part.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from clusters.clients import cluster_unreachable_mark
from clusters.dispatch import job_dispatch, job_dispatch_batch
from clusters.dispatch.claims import _claim_alone
from clusters.outcome import job_for_task
from clusters.reconcile import cluster_reconcile
from portal.models import Job, JobEvent, JobState, WorkerBeat
from rules import volcano
from tests.clusters.conftest import wait_for
from tests.soak.scenarios import retry_after_judged

pytestmark = pytest.mark.django_db(transaction=True)

RETRY_AFTER = 3


def _vcjob(sim, job) -> dict[str, Any] | None:
    return sim.get("jobs", volcano.volcano_job_name(str(job.public_id)), "gpupool")


def _in_thread(fn, *args: Any, **kwargs: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``fn`` on a thread of its own (its own database connection); its result lands in
    the dict under "result" (or "error")."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # reported by the test
            out["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _waiting_on_locks() -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(cur.fetchone()[0])


def _row_held(job_id: int, locked: threading.Event, release: threading.Event) -> None:
    """Hold the job's row lock (as another transaction would) until ``release``."""
    with transaction.atomic():
        Job.objects.select_for_update().filter(pk=job_id).first()
        locked.set()
        release.wait(30)


def test_a_batch_that_loaded_a_job_before_its_429_does_not_create_it_before_retry_after(
    sim, cluster, admit
):
    # A batch loads the job while no Retry-After holds it, then waits on a row lock (here:
    # holding back another job of the batch). Meanwhile an attempt of the same job is refused
    # 429. The batch's claim must not send the create the cluster just asked to wait for.
    throttled, other = admit(cluster, name="throttled"), admit(cluster, name="other")
    Job.objects.filter(pk=other.pk).update(
        dispatch_not_before=timezone.now() + dt.timedelta(seconds=60)
    )
    locked, release = threading.Event(), threading.Event()
    holder, _ = _in_thread(_row_held, other.pk, locked, release)
    assert locked.wait(10)
    batch, batch_out = _in_thread(job_dispatch_batch, job_ids=[throttled.pk, other.pk])
    try:
        # The batch loaded both jobs and waits to hold ``other`` back.
        assert wait_for(lambda: _waiting_on_locks() >= 1, timeout=10)
        sim.faults.add(verb="create", resource="jobs", status=429, retry_after=RETRY_AFTER, count=1)
        refused = job_dispatch(job_id=throttled.pk)
        assert "429" in refused.message and refused.retry_in >= RETRY_AFTER
    finally:
        release.set()
        holder.join(10)
        batch.join(30)
    assert "error" not in batch_out, batch_out
    assert _vcjob(sim, throttled) is None, "created before the cluster's Retry-After"
    throttled.refresh_from_db()
    assert throttled.state == JobState.ADMITTED
    assert throttled.dispatch_not_before > timezone.now()
    # Once the wait is over, the job goes.
    time.sleep(max(0.0, (throttled.dispatch_not_before - timezone.now()).total_seconds()))
    assert job_dispatch(job_id=throttled.pk).message == "submitted"
    retry = JobEvent.objects.get(job_id=throttled.pk, reason="DispatchRetry")
    created = JobEvent.objects.get(job_id=throttled.pk, reason="Submitted", to_state="SUBMITTED")
    assert (created.created_at - retry.created_at).total_seconds() >= RETRY_AFTER


def test_a_hand_off_that_loaded_the_job_before_its_429_waits_out_retry_after(sim, cluster, admit):
    # The one-job path: a duplicate hand-off loaded the job while another attempt's create
    # was in flight, and claims it after that create was refused 429.
    job = admit(cluster)
    loaded = job_for_task(job.pk)
    assert loaded is not None and loaded.dispatch_not_before is None
    sim.faults.add(verb="create", resource="jobs", status=429, retry_after=RETRY_AFTER, count=1)
    assert "429" in job_dispatch(job_id=job.pk).message
    outcome = _claim_alone(loaded)
    assert outcome is not None, "claimed (and would create) before the cluster's Retry-After"
    assert not outcome.done and RETRY_AFTER - 1 < outcome.retry_in <= RETRY_AFTER
    job.refresh_from_db()
    assert job.dispatch_attempts == 1  # no second attempt was counted
    assert job.dispatch_next_at >= job.dispatch_not_before
    assert _vcjob(sim, job) is None


def test_the_reconcile_does_not_clear_a_claim_taken_while_it_listed(sim, cluster, admit):
    # The reconcile reads the jobs, then lists the cluster (slow here). A job it read waiting
    # out a backoff is claimed meanwhile by an attempt whose create is in flight: sending it
    # again must not clear that claim (a second create beside the first, which may beat the
    # Retry-After the first is answered with).
    job = admit(cluster)
    Job.objects.filter(pk=job.pk).update(
        dispatch_next_at=timezone.now() + dt.timedelta(seconds=60), dispatch_owner=""
    )
    cluster_unreachable_mark(cluster, "connection refused")
    cluster.refresh_from_db()
    sim.faults.add(verb="list", resource="jobs", hang=1.0, count=1)
    reconcile, out = _in_thread(cluster_reconcile, cluster=cluster)
    assert wait_for(lambda: sim.faults.count(verb="list", kind="hang") == 1, timeout=10)
    owner = "other-host:1:abc"
    WorkerBeat.objects.update_or_create(name=owner, defaults={"seen_at": timezone.now()})
    lease = timezone.now() + dt.timedelta(seconds=30)
    Job.objects.filter(pk=job.pk).update(dispatch_owner=owner, dispatch_next_at=lease)
    reconcile.join(30)
    assert "error" not in out, out
    assert out["result"].ok
    job.refresh_from_db()
    assert (job.dispatch_owner, job.dispatch_next_at) == (owner, lease)
    assert job.pk not in out["result"].redispatched


def _named_with_429() -> uuid.UUID:
    """A job id whose Volcano Job name (``gp-`` and its hex) has "429" in it, as about one
    random id in a hundred has."""
    return uuid.UUID(f"{uuid.uuid4().hex[:20]}0429{uuid.uuid4().hex[:8]}")


def test_the_soak_counts_refusals_429_not_every_429_in_a_message(sim, cluster, admit, settings):
    # A 500 retried at once on a job whose name has "429" in it is no create sent before a
    # Retry-After; the soak read it as one ("1 creates retried before Retry-After").
    named = admit(cluster, name="named", public_id=_named_with_429())
    throttled = admit(cluster, name="throttled")
    sim.faults.add(verb="create", resource="jobs", status=500, count=1)
    assert job_dispatch(job_id=named.pk).retry_in is not None
    retry = JobEvent.objects.get(job_id=named.pk, reason="DispatchRetry")
    assert "429" in retry.message and ": 500 " in retry.message
    assert wait_for(lambda: job_dispatch(job_id=named.pk).message == "submitted", timeout=10)

    sim.faults.add(verb="create", resource="jobs", status=429, retry_after=1, count=1)
    assert job_dispatch(job_id=throttled.pk).retry_in >= 1
    assert wait_for(lambda: job_dispatch(job_id=throttled.pk).message == "submitted", timeout=10)

    # What the soak's row read before: every DispatchRetry with "429" anywhere in it, each
    # measured to the job's create; the 500 of the named job counted as a create sent early.
    old_reading = {
        e.job_id: e.created_at
        for e in JobEvent.objects.filter(reason="DispatchRetry", message__contains="429")
    }
    named_created = JobEvent.objects.get(job_id=named.pk, to_state="SUBMITTED").created_at
    assert named.pk in old_reading
    assert (named_created - old_reading[named.pk]).total_seconds() < 1

    judged = retry_after_judged([named.pk, throttled.pk], 1)
    assert (judged.refusals, judged.early, judged.beside) == (1, {}, [])
    # Measured to the create that followed the refusal: a longer wait would have been early.
    assert set(retry_after_judged([named.pk, throttled.pk], 30).early) == {throttled.pk}
