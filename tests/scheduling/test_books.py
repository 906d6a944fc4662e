"""The scheduler's books against the cycle's own snapshot: one victim per reclaim however slow
the delete, and a pool whose plans over-count a node is never offered as free.

A slow delete is a victim that stays PREEMPTING across cycles (its eviction has not finished):
exactly the timing of a Volcano Job delete that takes seconds, reproduced without a clock.
"""

from __future__ import annotations

import logging

import pytest

from portal.jobs.services import job_submit
from portal.jobs.state import job_transition
from portal.models import Job, JobState
from scheduling.cycle import run_cycle
from tests.conftest import job_body

pytestmark = pytest.mark.django_db


def _submit(user, team: str, n: int, **overrides) -> list[Job]:
    return [
        job_submit(
            user=user, data=job_body(team=team, name=f"{team}-{i}", replicas=1, **overrides)
        ).job
        for i in range(n)
    ]


def _states(jobs: list[Job]) -> list[str]:
    return [Job.objects.get(pk=j.pk).state for j in jobs]


@pytest.fixture
def full_pool(alice, charlie, vision, language, pool, quota):
    """2 × 8 A100s; Language's 16 one-GPU jobs run, 8 of them on Vision's idle quota."""
    pool("east", "a100-80gb", nodes=2, gpus=8)
    quota(vision, "a100-80gb", nominal=8)
    quota(language, "a100-80gb", nominal=8)
    borrowers = _submit(charlie, "language", 16, gpus_per_replica=1)
    assert len(run_cycle().admitted) == 16
    return borrowers


def test_a_reclaim_takes_one_victim_however_many_cycles_the_delete_takes(alice, full_pool):
    (claimer,) = _submit(alice, "vision", 1, gpus_per_replica=1)
    first = run_cycle()
    assert len(first.preempted) == 1
    victim = first.preempted[0]
    # The delete is slow: the victim stays PREEMPTING while cycle after cycle runs.
    for _ in range(5):
        again = run_cycle()
        assert again.preempted == [] and again.admitted == []
    assert Job.objects.filter(state=JobState.PREEMPTING).count() == 1
    claimer.refresh_from_db()
    assert (claimer.state, claimer.pending_reason_code) == (JobState.QUEUED, "PREEMPTING")

    # The delete completes: the victim is requeued, and its GPU goes to the job that
    # reclaimed it, not back to the victim's team.
    assert job_transition(
        job_id=victim, expected=JobState.PREEMPTING, to=JobState.QUEUED, reason="Preempted"
    )
    result = run_cycle()
    assert result.admitted == [claimer.pk] and result.preempted == []
    assert Job.objects.get(pk=victim).state == JobState.QUEUED


def test_a_reclaim_of_several_gpus_takes_only_what_it_needs_while_deletes_are_slow(
    alice, full_pool
):
    _submit(alice, "vision", 1, gpus_per_replica=3)
    assert len(run_cycle().preempted) == 3
    for _ in range(3):
        assert run_cycle().preempted == []
    assert Job.objects.filter(state=JobState.PREEMPTING).count() == 3


def test_an_over_counted_node_is_never_offered_as_free(bob, vision, pool, quota, caplog):
    """The issue's failing trial: plans read 11 GPUs on one 8-GPU node and 5 on the other
    while the pods run 8 and 8; the clamp made the second node look 3 free."""
    pool("east", "a100-80gb", nodes=2, gpus=8)
    quota(vision, "a100-80gb", nominal=100)
    running = _submit(bob, "vision", 16, gpus_per_replica=1)
    assert len(run_cycle().admitted) == 16
    for i, job in enumerate(running):
        Job.objects.filter(pk=job.pk).update(node_plan=["a100-80gb-0" if i < 11 else "a100-80gb-1"])
    (extra,) = _submit(bob, "vision", 1, gpus_per_replica=1)
    with caplog.at_level(logging.WARNING, logger="scheduling.snapshot"):
        result = run_cycle()
    assert result.admitted == []
    extra.refresh_from_db()
    assert extra.state == JobState.QUEUED and extra.pending_reason_code == "NO_CAPACITY"
    assert "over-count on east (a100-80gb): node a100-80gb-0: 11 GPUs planned" in caplog.text
    assert "3 too many" in caplog.text
