"""Preemption people can live with: a minimum runtime before a job may be a victim, and a
budget of GPUs preempted per cycle."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from rules.engine import EngineConfig, ReasonCode, RunningAllocation, decide
from rules.engine.snapshot import running_allocation
from tests.scheduling.engine.builders import (
    NOW,
    a_cluster,
    a_job,
    a_snapshot,
    preempted,
    reasons_by_job,
    running,
)


def bob_runs(job: str, gpus: int, node: int, *, ago: float = 60) -> RunningAllocation:
    return running(
        job,
        team="bob",
        cluster="east",
        model="a100-80gb",
        nodes=[f"east-a100-80gb-{node}"],
        gpus=gpus,
        started_minutes_ago=ago,
    )


def pool(nodes: int):
    return (
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", nodes, gpus=8))
        .with_quota("alice", "a100-80gb", 8 * nodes)
        .with_quota("bob", "a100-80gb", 0)
    )


def test_a_borrowed_job_within_its_minimum_runtime_is_not_a_victim():
    young = replace(bob_runs("young", 8, 0, ago=5), protected_until=NOW + timedelta(minutes=25))
    snap = pool(1).with_running(young).with_pending(a_job("a1", gpus=8)).build()
    decision = decide(snap)
    assert preempted(decision) == set()
    why = reasons_by_job(decision)["a1"]
    assert why.code is ReasonCode.MIN_RUNTIME
    assert "minimum runtime until 12:25 UTC (in 25m); reclaimed then" in why.message


def test_the_claimer_is_told_when_the_last_protected_job_it_needs_may_go():
    """Two protected 4-GPU borrowers on one node: an 8-GPU claim needs both, so it waits
    for the later of the two."""
    snap = (
        pool(1)
        .with_running(
            replace(bob_runs("b-a", 4, 0), protected_until=NOW + timedelta(minutes=5)),
            replace(bob_runs("b-b", 4, 0), protected_until=NOW + timedelta(minutes=40)),
        )
        .with_pending(a_job("a1", gpus=8), a_job("a2", gpus=8).submitted(5))
        .build()
    )
    decision = decide(snap)
    assert preempted(decision) == set()
    for job in ("a1", "a2"):  # the second one of the same shape through the memo
        assert "until 12:40 UTC (in 40m)" in reasons_by_job(decision)[job].message


def test_the_older_borrower_past_its_minimum_runtime_goes_instead_of_the_newest():
    """Without protection the newest borrower is the victim; protected, the older one goes."""
    newest = bob_runs("newest", 8, 0, ago=5)
    older = bob_runs("older", 8, 1, ago=120)
    snap = pool(2).with_running(newest, older).with_pending(a_job("a1", gpus=8))
    assert preempted(decide(snap.build())) == {"newest"}
    guarded = replace(newest, protected_until=NOW + timedelta(minutes=1))
    snap.running = [guarded, older]
    assert preempted(decide(snap.build())) == {"older"}


def test_protection_ends_at_its_instant():
    ended = replace(bob_runs("b1", 8, 0), protected_until=NOW)
    snap = pool(1).with_running(ended).with_pending(a_job("a1", gpus=8)).build()
    assert preempted(decide(snap)) == {"b1"}


def test_the_fast_constructor_carries_the_protection():
    until = NOW + timedelta(minutes=3)
    slow = replace(bob_runs("b1", 8, 0), protected_until=until)
    fast = running_allocation(
        "b1", "bob", "east", "a100-80gb", 1, 8, 0, slow.started_at, slow.nodes, False, until
    )
    assert fast == slow


def budget(gpus: int | None) -> EngineConfig:
    return EngineConfig(preemption_budget_gpus=gpus)


def test_the_budget_stops_a_second_reclaim_in_the_same_cycle():
    snap = (
        pool(2)
        .with_running(bob_runs("b0", 8, 0, ago=30), bob_runs("b1", 8, 1, ago=20))
        .with_pending(a_job("a1", gpus=8).submitted(20), a_job("a2", gpus=8).submitted(10))
        .build()
    )
    assert preempted(decide(snap, budget(None))) == {"b0", "b1"}
    decision = decide(snap, budget(8))
    assert preempted(decision) == {"b1"}  # the newest borrower, for the first in line
    why = reasons_by_job(decision)["a2"]
    assert why.code is ReasonCode.PREEMPTION_BUDGET
    assert "8 GPUs per cycle, 8 being preempted already" in why.message


def test_preemptions_under_way_count_against_the_budget():
    going = replace(bob_runs("b0", 8, 0), preempting=True)
    snap = (
        pool(2)
        .with_running(going, bob_runs("b1", 8, 1))
        .with_pending(a_job("a1", gpus=8).submitted(20), a_job("a2", gpus=8).submitted(10))
        .build()
    )
    decision = decide(snap, budget(8))
    # a1 takes the GPUs already on their way back; a2 would need b1 too: over budget.
    assert preempted(decision) == set()
    assert reasons_by_job(decision)["a2"].code is ReasonCode.PREEMPTION_BUDGET


def test_a_reclaim_larger_than_the_whole_budget_goes_alone():
    """A 16-GPU gang must not wait forever behind a budget of 8: it goes when nothing else
    is being preempted."""
    snap = (
        pool(2)
        .with_running(bob_runs("b0", 8, 0), bob_runs("b1", 8, 1))
        .with_pending(a_job("big", gpus=8, replicas=2))
        .build()
    )
    assert preempted(decide(snap, budget(8))) == {"b0", "b1"}
    busy = replace(snap, running=(replace(snap.running[0], preempting=True), snap.running[1]))
    decision = decide(busy, budget(8))
    assert preempted(decision) == set()
    assert reasons_by_job(decision)["big"].code is ReasonCode.PREEMPTION_BUDGET
