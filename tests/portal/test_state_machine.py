"""The job state machine: every edge of the architecture page, and nothing else."""

from __future__ import annotations

import itertools
import threading

import pytest
from django.db import connection

from portal.jobs.state import LEGAL_TRANSITIONS, IllegalTransition, job_transition
from portal.models import Job, JobEvent, JobState
from tests.factories import JobFactory

S = JobState
# Drawn from shared/design/ARCHITECTURE.md, written out by hand so the table is checked
# against the picture rather than against itself.
EXPECTED_EDGES = {
    (S.QUEUED, S.ADMITTED),
    (S.QUEUED, S.CANCELLING),
    (S.QUEUED, S.CANCELLED),
    (S.QUEUED, S.FAILED),
    (S.ADMITTED, S.SUBMITTED),
    # Not in the picture yet: a job whose cluster stayed unreachable, never created there,
    # goes back to the queue (docs/reliability.md; clusters.status.unreachable_requeue).
    (S.ADMITTED, S.QUEUED),
    (S.ADMITTED, S.PREEMPTING),
    (S.ADMITTED, S.CANCELLING),
    (S.ADMITTED, S.FAILED),
    (S.SUBMITTED, S.RUNNING),
    (S.SUBMITTED, S.PREEMPTING),
    (S.SUBMITTED, S.CANCELLING),
    (S.SUBMITTED, S.FAILED),
    (S.RUNNING, S.SUCCEEDED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.PREEMPTING),
    (S.RUNNING, S.CANCELLING),
    (S.PREEMPTING, S.QUEUED),
    (S.PREEMPTING, S.FAILED),
    (S.CANCELLING, S.CANCELLED),
    (S.CANCELLING, S.FAILED),
}
ALL_PAIRS = list(itertools.product(S, S))


def test_the_table_is_the_architecture_picture():
    table = {(a, b) for a, targets in LEGAL_TRANSITIONS.items() for b in targets}
    assert table == EXPECTED_EDGES


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("from_state", "to_state"), ALL_PAIRS, ids=[f"{a}->{b}" for a, b in ALL_PAIRS]
)
def test_each_edge_is_allowed_or_refused_without_side_effects(from_state, to_state):
    job = JobFactory(state=from_state)
    before = Job.objects.values().get(pk=job.pk)
    if (from_state, to_state) in EXPECTED_EDGES:
        assert job_transition(job_id=job.pk, expected=from_state, to=to_state, reason="Test")
        job.refresh_from_db()
        assert job.state == to_state
        event = JobEvent.objects.get(job=job)
        assert (event.from_state, event.to_state, event.reason) == (from_state, to_state, "Test")
    else:
        with pytest.raises(IllegalTransition):
            job_transition(job_id=job.pk, expected=from_state, to=to_state, reason="Test")
        assert Job.objects.values().get(pk=job.pk) == before
        assert not JobEvent.objects.filter(job=job).exists()


@pytest.mark.django_db
def test_a_stale_expectation_loses_and_changes_nothing():
    job = JobFactory(state=S.RUNNING)
    assert not job_transition(job_id=job.pk, expected=S.QUEUED, to=S.ADMITTED, reason="Late")
    job.refresh_from_db()
    assert job.state == S.RUNNING
    assert not JobEvent.objects.filter(job=job).exists()


@pytest.mark.django_db
def test_several_expected_states_record_the_actual_origin():
    job = JobFactory(state=S.SUBMITTED)
    assert job_transition(
        job_id=job.pk, expected=(S.ADMITTED, S.SUBMITTED, S.RUNNING), to=S.CANCELLING, reason="X"
    )
    assert JobEvent.objects.get(job=job).from_state == S.SUBMITTED


@pytest.mark.django_db
def test_timestamps_follow_the_state():
    job = JobFactory(state=S.QUEUED)
    job_transition(job_id=job.pk, expected=S.QUEUED, to=S.ADMITTED, reason="Admitted")
    job_transition(job_id=job.pk, expected=S.ADMITTED, to=S.SUBMITTED, reason="Created")
    job_transition(job_id=job.pk, expected=S.SUBMITTED, to=S.RUNNING, reason="Running")
    job_transition(job_id=job.pk, expected=S.RUNNING, to=S.SUCCEEDED, reason="Completed")
    job.refresh_from_db()
    assert job.admitted_at <= job.started_at <= job.finished_at
    assert [e.to_state for e in job.events.all()] == [
        S.ADMITTED,
        S.SUBMITTED,
        S.RUNNING,
        S.SUCCEEDED,
    ]


@pytest.mark.django_db
def test_requeue_after_preemption_clears_the_reservation_but_keeps_submit_time(catalog):
    from scheduling.models import GpuModel

    job = JobFactory(state=S.RUNNING, gpu_model=GpuModel.objects.get(key="t4"))
    submitted = job.submitted_at
    job_transition(job_id=job.pk, expected=S.RUNNING, to=S.PREEMPTING, reason="Preempted")
    job_transition(job_id=job.pk, expected=S.PREEMPTING, to=S.QUEUED, reason="Requeued")
    job.refresh_from_db()
    assert (job.state, job.gpu_model, job.started_at) == (S.QUEUED, None, None)
    assert job.submitted_at == submitted


@pytest.mark.django_db
@pytest.mark.parametrize("bulk", [False, True], ids=["one job", "the cycle's bulk admission"])
def test_a_new_admission_starts_a_new_dispatch(bulk):
    """Attempts spent dispatching an earlier run (before a preemption) must not count against
    the next one, or its first 429 would fail it."""
    from django.utils import timezone

    from portal.jobs.state import Change, jobs_transition_bulk

    job = JobFactory(state=S.QUEUED, dispatch_attempts=7, dispatch_next_at=timezone.now())
    if bulk:
        change = Change(job_id=job.pk, updates={"node_plan": []}, message="")
        jobs_transition_bulk(changes=[change], expected=S.QUEUED, to=S.ADMITTED, reason="Admitted")
    else:
        job_transition(job_id=job.pk, expected=S.QUEUED, to=S.ADMITTED, reason="Admitted")
    job.refresh_from_db()
    assert (job.state, job.dispatch_attempts, job.dispatch_next_at) == (S.ADMITTED, 0, None)


@pytest.mark.django_db(transaction=True)
def test_two_racing_workers_move_a_job_once():
    """Both workers try QUEUED → ADMITTED at the same moment: exactly one wins, one event."""
    job = JobFactory(state=S.QUEUED)
    barrier = threading.Barrier(2)
    results: list[bool] = []

    def worker() -> None:
        barrier.wait()
        try:
            results.append(
                job_transition(job_id=job.pk, expected=S.QUEUED, to=S.ADMITTED, reason="R")
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, True]
    assert JobEvent.objects.filter(job=job).count() == 1


@pytest.mark.django_db
def test_a_bulk_transition_refuses_the_same_job_twice(bob, vision):
    from portal.jobs.state import Change, jobs_transition_bulk

    job = JobFactory(team=vision, owner=bob)
    with pytest.raises(ValueError, match="at most once"):
        jobs_transition_bulk(
            changes=[Change(job_id=job.pk), Change(job_id=job.pk)],
            expected=JobState.QUEUED,
            to=JobState.ADMITTED,
            reason="Admitted",
        )
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and not job.events.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("bulk", [False, True], ids=["one job", "the cycle's bulk admission"])
def test_events_of_a_job_keep_causal_order_when_the_caller_read_its_clock_first(
    bulk, api_as, bob, catalog
):
    """The scheduling cycle reads ``now`` before it loads the queue: a submit committed in
    between was stamped later than the cycle's ``now``, and its "Admitted" came out a few
    milliseconds before its "Submitted". The admission's moment never precedes the submit."""
    import datetime as dt

    from portal.jobs.state import Change, jobs_transition_bulk
    from tests.conftest import job_body

    response = api_as(bob).post("/api/v1/jobs/", job_body(), format="json")
    job = Job.objects.get(public_id=response.json()["id"])
    submitted = job.events.get(reason="Submitted").created_at
    cycle_now = submitted - dt.timedelta(milliseconds=4)
    if bulk:
        change = Change(job_id=job.pk, updates={"node_plan": []}, message="")
        jobs_transition_bulk(
            changes=[change], expected=S.QUEUED, to=S.ADMITTED, reason="Admitted", now=cycle_now
        )
    else:
        job_transition(
            job_id=job.pk, expected=S.QUEUED, to=S.ADMITTED, reason="Admitted", now=cycle_now
        )
    timeline = list(job.events.order_by("created_at", "id").values_list("reason", "created_at"))
    assert [reason for reason, _ in timeline] == ["Submitted", "Admitted"]
    assert timeline[1][1] >= timeline[0][1]
    job.refresh_from_db()
    assert job.state_changed_at == timeline[1][1]


# ---------------------------------------------------------------------------------------------
# RESTARTING: a status of a RUNNING job, not a state of the machine (Job.status says why)
# ---------------------------------------------------------------------------------------------
def _with_record(state: JobState, phase: str | None) -> Job:
    from django.utils import timezone

    from clusters.models import Cluster, VolcanoJobRecord

    cluster, _ = Cluster.objects.get_or_create(name="east", defaults={"api_url": "https://k.test"})
    job = JobFactory(state=state, cluster=cluster)
    if phase is not None:
        VolcanoJobRecord.objects.create(
            job=job, cluster=cluster, namespace="gpupool", name=f"gp-{job.pk}",
            submission_uid="u", phase=phase, created_at=timezone.now(),
        )  # fmt: skip
    return Job.objects.select_related("volcano").get(pk=job.pk)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("state", "phase", "status"),
    [
        (S.RUNNING, "Pending", "RESTARTING"),
        (S.RUNNING, "Restarting", "RESTARTING"),
        (S.RUNNING, "Running", "RUNNING"),
        (S.RUNNING, None, "RUNNING"),
        (S.SUBMITTED, "Pending", "SUBMITTED"),
        (S.CANCELLING, "Pending", "CANCELLING"),
        (S.PREEMPTING, "Restarting", "PREEMPTING"),
    ],
    ids=[
        "running whose gang waits again is restarting",
        "running whose gang is being restarted is restarting",
        "running and running is running",
        "running without a record yet is running",
        "submitted and pending is only submitted",
        "a cancel under way says so",
        "a preemption under way says so",
    ],
)
def test_the_status_everyone_shows_is_the_state_or_restarting(state, phase, status):
    job = _with_record(state, phase)
    assert job.status == status
    assert ("wait to be placed again" in job.status_reason) == (status == "RESTARTING")


@pytest.mark.django_db
def test_restarting_is_not_a_state_and_a_restarting_job_leaves_by_runnings_edges():
    """It holds its GPUs and its start: every way out of RUNNING is open to it, and none of
    them is new; the machine has no RESTARTING state to keep in step with the books."""
    assert "RESTARTING" not in JobState.values
    for to in (S.SUCCEEDED, S.FAILED, S.PREEMPTING, S.CANCELLING):
        job = _with_record(S.RUNNING, "Pending")
        assert job.status == "RESTARTING"
        assert job_transition(job_id=job.pk, expected=S.RUNNING, to=to, reason="Test")
        assert Job.objects.select_related("volcano").get(pk=job.pk).status == to
