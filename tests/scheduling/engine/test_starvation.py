"""The starvation guard: a large job waiting past the guard gets capacity held for it."""

from __future__ import annotations

from rules.engine import EngineConfig, ReasonCode, decide
from tests.scheduling.engine.builders import (
    SnapshotBuilder,
    a_cluster,
    a_job,
    a_snapshot,
    admitted,
    fast_guard,
    reasons_by_job,
    running,
)


def half_busy_pool() -> SnapshotBuilder:
    """Two 8-GPU A100 nodes, each with 4 GPUs busy: no node has 8 free."""
    return (
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 2, gpus=8))
        .with_cohort_quota("default", "a100-80gb", 16)
        .with_running(
            running(
                "r0",
                team="carol",
                cluster="east",
                model="a100-80gb",
                nodes=["east-a100-80gb-0"],
                gpus=4,
                started_minutes_ago=10,
            ),
            running(
                "r1",
                team="carol",
                cluster="east",
                model="a100-80gb",
                nodes=["east-a100-80gb-1"],
                gpus=2,
                started_minutes_ago=10,
            ),
        )
    )


def test_before_the_guard_small_jobs_overtake_the_large_one() -> None:
    snap = (
        half_busy_pool()
        .with_pending(a_job("large", team="alice", gpus=8).on_models("a100-80gb").submitted(30))
        .with_pending(a_job("small", team="bob", gpus=2).on_models("a100-80gb").submitted(1))
        .build()
    )
    decision = decide(snap, fast_guard(60))
    assert "small" in admitted(decision)
    assert reasons_by_job(decision)["large"].code is ReasonCode.NO_CAPACITY
    assert not decision.holds


def test_after_the_guard_capacity_is_held_and_shown_in_both_reasons() -> None:
    snap = (
        half_busy_pool()
        .with_pending(a_job("large", team="alice", gpus=8).on_models("a100-80gb").submitted(90))
        .with_pending(a_job("small", team="bob", gpus=2).on_models("a100-80gb").submitted(1))
        .build()
    )
    decision = decide(snap, fast_guard(60))
    (hold,) = decision.holds
    # held on the node closest to fitting: node 1 has 6 free
    assert hold.job_id == "large" and hold.nodes == (("east-a100-80gb-1", 6),)
    large = reasons_by_job(decision)["large"]
    assert large.code is ReasonCode.HOLDING_CAPACITY
    assert "waited 1h 30m (guard 1h 0m): holding 6 of 8 GPUs on 1 node in east" in large.message
    assert "cohort quota" not in large.message  # the cohort can lend 10: only nodes are held
    # the small job may still use GPUs the large one cannot use yet (node 0)
    assert admitted(decision)["small"].node_plan == ("east-a100-80gb-0",)


def test_a_job_that_only_fits_in_held_room_says_so() -> None:
    snap = (
        half_busy_pool()
        .with_pending(a_job("large", team="alice", gpus=8).on_models("a100-80gb").submitted(90))
        .with_pending(a_job("medium", team="bob", gpus=6).on_models("a100-80gb").submitted(1))
        .build()
    )
    decision = decide(snap, fast_guard(60))
    medium = reasons_by_job(decision)["medium"]
    assert medium.code is ReasonCode.CAPACITY_HELD
    # large is alice's: bob's job names its team, never the job itself.
    assert "held for an older job of team alice" in medium.message
    assert "large" not in medium.message


def test_a_job_held_back_for_its_own_teams_older_job_names_it() -> None:
    snap = (
        half_busy_pool()
        .with_pending(a_job("large", team="alice", gpus=8).on_models("a100-80gb").submitted(90))
        .with_pending(a_job("medium", team="alice", gpus=6).on_models("a100-80gb").submitted(1))
        .build()
    )
    medium = reasons_by_job(decide(snap, fast_guard(60)))["medium"]
    assert medium.code is ReasonCode.CAPACITY_HELD
    assert "held for older job large" in medium.message


def test_a_starving_head_keeps_its_fair_share_turn_and_holds_what_is_left() -> None:
    """The guard does not let a job jump the fair-share order (bob, with the lower share, goes
    first); it stops jobs *behind* the starving head from taking what the head lacks."""
    snap = (
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 1, gpus=8))
        .with_cohort_quota("default", "a100-80gb", 8)
        .with_usage("alice", "a100-80gb", 50_000)
        .with_pending(a_job("large", team="alice", gpus=8).on_models("a100-80gb").submitted(500))
        .with_pending(a_job("small", team="bob", gpus=2).on_models("a100-80gb").submitted(1))
        .with_pending(a_job("later", team="alice", gpus=1).on_models("a100-80gb").submitted(0))
        .build()
    )
    decision = decide(snap, fast_guard(60))
    assert list(admitted(decision)) == ["small"]
    (hold,) = decision.holds
    assert hold.job_id == "large" and hold.gpus == 6 and hold.cohort_gpus == 6
    assert reasons_by_job(decision)["later"].code is ReasonCode.CAPACITY_HELD


def test_one_hold_per_model_goes_to_the_first_starving_head_in_line() -> None:
    snap = half_busy_pool()
    for i in range(5):
        snap.with_pending(
            a_job(f"large{i}", team=f"t{i}", gpus=8).on_models("a100-80gb").submitted(100 + i)
        )
    decision = decide(snap.build(), fast_guard(60))
    # all teams have share 0, so the line goes by submit time: large4 is first
    assert [h.job_id for h in decision.holds] == ["large4"]
    codes = {p.job_id: p.code for p in decision.pending}
    assert codes["large4"] is ReasonCode.HOLDING_CAPACITY
    # they would not fit even without the hold (no node has 8 free), so that is what they say
    assert {codes[f"large{i}"] for i in range(4)} == {ReasonCode.NO_CAPACITY}


def test_holds_can_be_switched_off() -> None:
    snap = (
        half_busy_pool()
        .with_pending(a_job("large", team="alice", gpus=8).on_models("a100-80gb").submitted(90))
        .with_pending(a_job("medium", team="bob", gpus=6).on_models("a100-80gb").submitted(1))
        .build()
    )
    config = EngineConfig(starvation_wait=fast_guard(60).starvation_wait, max_capacity_holds=0)
    decision = decide(snap, config)
    assert not decision.holds and "medium" in admitted(decision)


def test_higher_priority_work_is_not_blocked_by_a_hold() -> None:
    snap = (
        half_busy_pool()
        .with_pending(a_job("large", team="alice", gpus=8).on_models("a100-80gb").submitted(90))
        .with_pending(a_job("urgent", team="bob", gpus=6).on_models("a100-80gb").priority(5))
        .build()
    )
    decision = decide(snap, fast_guard(60))
    assert "urgent" in admitted(decision)


def test_room_held_is_read_again_for_each_job_not_kept_from_the_first_asked() -> None:
    # large (starving) holds node 1's 6 free GPUs. bob's 2 x 4 gang would fit without the
    # hold (4 on node 0, 4 on node 1): held for another job. dave's 2 GPUs then take node 0's
    # room, so erin's gang of the same shape would not fit even without the hold: erin is
    # told that jobs ahead took the room, not that it is held (only "no room" may reclaim).
    snap = (
        half_busy_pool()
        .with_quota("dave", "a100-80gb", 4)
        .with_pending(a_job("large", team="alice", gpus=8).on_models("a100-80gb").submitted(90))
        .with_pending(
            a_job("bob-gang", team="bob", gpus=4, replicas=2).on_models("a100-80gb").submitted(50)
        )
        .with_pending(a_job("dave-small", team="dave", gpus=2).on_models("a100-80gb").submitted(40))
        .with_pending(
            a_job("erin-gang", team="erin", gpus=4, replicas=2).on_models("a100-80gb").submitted(30)
        )
        .build()
    )
    decision = decide(snap, fast_guard(60))
    assert admitted(decision)["dave-small"].node_plan == ("east-a100-80gb-0",)
    reasons = reasons_by_job(decision)
    assert reasons["bob-gang"].code is ReasonCode.CAPACITY_HELD
    assert reasons["erin-gang"].code is ReasonCode.WAITING_BEHIND
