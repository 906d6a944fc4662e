"""Line order: priority, then weighted dominant share (progressive filling), then FIFO."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from rules.engine import EngineConfig, ReasonCode, Snapshot, decide
from tests.scheduling.engine.builders import (
    ClusterBuilder,
    a_cluster,
    a_job,
    a_snapshot,
    admitted,
    reasons_by_job,
)


def one_a100_node(gpus: int = 8) -> ClusterBuilder:
    return a_cluster().with_nodes("a100-80gb", 1, gpus=gpus)


ORDER_CASES = [
    (
        "higher priority goes first even from the team with the larger share",
        a_snapshot()
        .with_clusters(one_a100_node(4))
        .with_cohort_quota("default", "a100-80gb", 4)
        .with_usage("alice", "a100-80gb", 10_000)
        .with_pending(
            a_job("alice-urgent", team="alice", gpus=4).on_models("a100-80gb").priority(10)
        )
        .with_pending(a_job("bob-normal", team="bob", gpus=4).on_models("a100-80gb").submitted(60))
        .build(),
        "alice-urgent",
    ),
    (
        "at equal priority the team with less decayed usage goes first",
        a_snapshot()
        .with_clusters(one_a100_node(4))
        .with_cohort_quota("default", "a100-80gb", 4)
        .with_usage("alice", "a100-80gb", 100)
        .with_pending(a_job("alice-1", team="alice", gpus=4).on_models("a100-80gb").submitted(60))
        .with_pending(a_job("bob-1", team="bob", gpus=4).on_models("a100-80gb"))
        .build(),
        "bob-1",
    ),
    (
        "a weight-2 team with the same usage goes first",
        a_snapshot()
        .with_clusters(one_a100_node(4))
        .with_team("alice", weight=1)
        .with_team("bob", weight=2)
        .with_cohort_quota("default", "a100-80gb", 4)
        .with_usage("alice", "a100-80gb", 100)
        .with_usage("bob", "a100-80gb", 100)
        .with_pending(a_job("alice-1", team="alice", gpus=4).on_models("a100-80gb").submitted(60))
        .with_pending(a_job("bob-1", team="bob", gpus=4).on_models("a100-80gb"))
        .build(),
        "bob-1",
    ),
    (
        "within a team the earlier submit goes first",
        a_snapshot()
        .with_clusters(one_a100_node(4))
        .with_quota("alice", "a100-80gb", 4)
        .with_pending(a_job("late", gpus=4).on_models("a100-80gb").submitted(5))
        .with_pending(a_job("early", gpus=4).on_models("a100-80gb").submitted(50))
        .build(),
        "early",
    ),
]


@pytest.mark.parametrize(
    ("snapshot", "winner"), [c[1:] for c in ORDER_CASES], ids=[c[0] for c in ORDER_CASES]
)
def test_who_goes_first(snapshot: Snapshot, winner: str) -> None:
    decision = decide(snapshot)
    assert list(admitted(decision)) == [winner]


def deep_queues() -> Snapshot:
    snap = (
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 2, gpus=8))
        .with_team("alice", weight=1)
        .with_team("bob", weight=1)
        .with_team("carol", weight=2)
        # more cohort quota than GPUs, so capacity (not quota) is what runs out
        .with_cohort_quota("default", "a100-80gb", 64)
    )
    for team in ("alice", "bob", "carol"):
        for i in range(100):
            snap.with_pending(
                a_job(f"{team}-{i:03}", team=team, gpus=1).on_models("a100-80gb").submitted(200 - i)
            )
    return snap.build()


def test_deep_queues_drain_at_their_fair_rate_within_one_cycle() -> None:
    decision = decide(deep_queues())
    per_team = Counter(a.team for a in decision.admissions)
    assert per_team == {"alice": 4, "bob": 4, "carol": 8}
    # FIFO within each team.
    carol = [a.job_id for a in decision.admissions if a.team == "carol"]
    assert carol == sorted(carol)


def test_shares_reported_before_and_after() -> None:
    decision = decide(deep_queues())
    shares = {s.team: s for s in decision.shares}
    assert shares["alice"].share_after == pytest.approx(4 / 16)
    assert shares["carol"].share_after == pytest.approx(8 / 16 / 2)
    assert shares["carol"].allocation_share == pytest.approx(0.5)
    assert shares["carol"].dominant_model == "a100-80gb"
    assert all(s.share_before == 0 for s in decision.shares)


def test_positions_follow_the_line_and_count_up_from_one() -> None:
    decision = decide(deep_queues())
    positions = [p.position for p in decision.pending]
    assert positions == list(range(1, 301 - 16))
    # the next in line after the cycle is the lowest-share team's head
    first = decision.pending[0]
    assert first.code is ReasonCode.WAITING_BEHIND
    assert "16 admitted this cycle" in first.message


def test_same_input_same_decision_and_input_order_does_not_matter() -> None:
    snap = deep_queues()
    d1 = decide(snap)
    assert decide(snap) == d1
    jobs = list(snap.pending)
    random.Random(7).shuffle(jobs)
    assert decide(replace(snap, pending=tuple(jobs))) == d1


def test_lookback_bounds_what_a_team_has_considered() -> None:
    snap = deep_queues()
    snap = replace(snap, backlog=())
    decision = decide(snap, EngineConfig(lookback_per_team=10))
    assert decision.considered == 30
    per_team = {n.team: n for n in decision.not_considered}
    assert set(per_team) == {"alice", "bob", "carol"}
    assert len(per_team["alice"].job_ids) == 90
    assert per_team["alice"].job_ids[0] == "alice-010"
    assert per_team["alice"].position_from == len(decision.pending) + 1
    assert "position at least" in per_team["alice"].message


def test_backlog_counts_are_reported_without_rows() -> None:
    snap = (
        a_snapshot()
        .with_clusters(one_a100_node())
        .with_quota("alice", "a100-80gb", 8)
        .with_pending(a_job("a1", gpus=1).on_models("a100-80gb"))
        .with_backlog("alice", 999_000)
        .build()
    )
    decision = decide(snap)
    (nc,) = decision.not_considered
    assert nc.unloaded == 999_000 and nc.job_ids == ()
    assert "999000 more not loaded" in nc.message


def test_the_share_is_recomputed_after_each_admission() -> None:
    """Progressive filling: alice (lower usage) does not take everything, she takes until her
    share passes bob's, then they alternate."""
    snap = (
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 1, gpus=8))
        .with_cohort_quota("default", "a100-80gb", 8)
        .with_usage("bob", "a100-80gb", 0.0)
    )
    for i in range(8):
        snap.with_pending(a_job(f"a{i}", team="alice", gpus=1).on_models("a100-80gb"))
        snap.with_pending(a_job(f"b{i}", team="bob", gpus=1).on_models("a100-80gb"))
    decision = decide(snap.build())
    assert Counter(a.team for a in decision.admissions) == {"alice": 4, "bob": 4}
    teams = [a.team for a in decision.admissions]
    assert teams[:4] in (["alice", "bob"] * 2, ["bob", "alice"] * 2)


def test_waiting_reason_counts_jobs_ahead() -> None:
    decision = decide(deep_queues())
    last = decision.pending[-1]
    assert last.position == len(decision.pending)
    assert f"waiting behind {len(decision.pending) - 1 + 16} jobs" in last.message
    assert reasons_by_job(decision)[last.job_id].code is ReasonCode.WAITING_BEHIND
