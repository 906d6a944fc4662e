"""A job's timestamps never run backwards along its states, whatever clock a writer read.

``submitted_at ≤ admitted_at ≤ started_at ≤ finished_at``, and the events of its states in the
same order, each state's timestamp the moment of its event. Writers read their clocks before
the change they make (the scheduling cycle before it loads the queue), run on other hosts, or
pass a cluster's time (whole seconds, another clock): the row decides, under its own lock.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models import F
from django.utils import timezone

from portal.jobs.state import Change, job_transition, jobs_transition_bulk
from portal.models import Job, JobAttempt, JobEvent, JobState
from tests.factories import JobFactory

S = JobState
MS = dt.timedelta(milliseconds=1)

pytestmark = pytest.mark.django_db


def _queued_at(moment: dt.datetime) -> Job:
    return JobFactory(state=S.QUEUED, submitted_at=moment, state_changed_at=moment)


def _state_events(job: Job) -> list[tuple[str, dt.datetime]]:
    """The events of the job's changes of state, in the order they were written."""
    return list(
        JobEvent.objects.filter(job=job)
        .exclude(from_state=F("to_state"))
        .order_by("id")
        .values_list("to_state", "created_at")
    )


def _assert_in_order(job: Job) -> None:
    job.refresh_from_db()
    chain = [job.submitted_at, job.admitted_at, job.started_at, job.finished_at]
    present = [t for t in chain if t is not None]
    assert present == sorted(present), f"timestamps run backwards: {chain}"
    times = [at for _, at in _state_events(job)]
    assert times == sorted(times), f"events run backwards: {_state_events(job)}"


@pytest.mark.parametrize("bulk", [False, True], ids=["one job", "the cycle's bulk admission"])
def test_an_admission_read_before_the_submit_is_not_earlier_than_the_submit(bulk):
    """The cycle's ``now`` was read before a submit committed: ``admitted_at`` (and the event)
    take the submit's moment, not a moment before it; a negative queue wait is impossible."""
    submitted = timezone.now()
    job = _queued_at(submitted)
    cycle_now = submitted - 25 * MS
    if bulk:
        jobs_transition_bulk(
            changes=[Change(job_id=job.pk, updates={"node_plan": []})],
            expected=S.QUEUED,
            to=S.ADMITTED,
            reason="Admitted",
            now=cycle_now,
        )
    else:
        job_transition(
            job_id=job.pk, expected=S.QUEUED, to=S.ADMITTED, reason="Admitted", now=cycle_now
        )
    job.refresh_from_db()
    assert job.admitted_at == submitted == job.state_changed_at
    assert JobEvent.objects.get(job=job, to_state=S.ADMITTED).created_at == submitted
    _assert_in_order(job)


def test_every_state_keeps_its_order_when_each_writer_reads_an_older_clock():
    """Each writer's clock is a few milliseconds behind the one before: every state's timestamp
    is the moment of its event, and the chain never goes back."""
    submitted = timezone.now()
    job = _queued_at(submitted)
    steps = [
        (S.QUEUED, S.ADMITTED),
        (S.ADMITTED, S.SUBMITTED),
        (S.SUBMITTED, S.RUNNING),
        (S.RUNNING, S.SUCCEEDED),
    ]
    for k, (before, after) in enumerate(steps, start=1):
        assert job_transition(
            job_id=job.pk, expected=before, to=after, reason="Test", now=submitted - k * 5 * MS
        )
    job.refresh_from_db()
    assert job.admitted_at == job.started_at == job.finished_at == submitted
    _assert_in_order(job)


def test_a_clusters_start_and_end_are_not_before_the_states_before_them():
    """The watcher passes the cluster's own times (whole seconds, another clock): a start
    before the admission and an end before the start are raised to the state before them."""
    submitted = timezone.now()
    job = _queued_at(submitted)
    job_transition(job_id=job.pk, expected=S.QUEUED, to=S.ADMITTED, reason="Admitted")
    job_transition(job_id=job.pk, expected=S.ADMITTED, to=S.SUBMITTED, reason="Submitted")
    job.refresh_from_db()
    admitted = job.admitted_at
    job_transition(
        job_id=job.pk,
        expected=S.SUBMITTED,
        to=S.RUNNING,
        reason="Running",
        updates={"started_at": admitted - dt.timedelta(seconds=1)},
    )
    job.refresh_from_db()
    assert job.started_at == admitted
    job_transition(
        job_id=job.pk,
        expected=S.RUNNING,
        to=S.SUCCEEDED,
        reason="Succeeded",
        updates={"finished_at": admitted - dt.timedelta(seconds=2)},
    )
    job.refresh_from_db()
    assert job.finished_at == job.started_at == admitted
    _assert_in_order(job)


def test_a_clusters_start_between_the_states_is_kept():
    """A cluster time that is already in order is the job's own: it stays as reported."""
    job = _queued_at(timezone.now() - dt.timedelta(minutes=5))
    job_transition(job_id=job.pk, expected=S.QUEUED, to=S.ADMITTED, reason="Admitted")
    job_transition(job_id=job.pk, expected=S.ADMITTED, to=S.SUBMITTED, reason="Submitted")
    job.refresh_from_db()
    started = job.admitted_at + 30 * MS
    job_transition(
        job_id=job.pk,
        expected=S.SUBMITTED,
        to=S.RUNNING,
        reason="Running",
        updates={"started_at": started},
    )
    job.refresh_from_db()
    assert job.started_at == started


def test_a_requeued_run_does_not_end_before_it_started():
    """A requeue written with an older clock archives the run ending at the requeue's event,
    never before the run's own start."""
    submitted = timezone.now()
    job = _queued_at(submitted)
    for before, after in [(S.QUEUED, S.ADMITTED), (S.ADMITTED, S.SUBMITTED)]:
        job_transition(job_id=job.pk, expected=before, to=after, reason="Test")
    job_transition(job_id=job.pk, expected=S.SUBMITTED, to=S.RUNNING, reason="Running")
    job_transition(job_id=job.pk, expected=S.RUNNING, to=S.PREEMPTING, reason="Preempted")
    job.refresh_from_db()
    stopped = job.state_changed_at
    job_transition(
        job_id=job.pk,
        expected=S.PREEMPTING,
        to=S.QUEUED,
        reason="Preempted",
        now=stopped - 10 * MS,
    )
    attempt = JobAttempt.objects.get(job=job)
    assert attempt.admitted_at <= attempt.started_at <= attempt.ended_at
    assert attempt.ended_at == stopped
    _assert_in_order(job)
