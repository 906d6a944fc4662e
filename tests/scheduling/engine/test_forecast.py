"""The start-estimate simulation: the engine replayed through expected ends of running jobs."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from rules.engine import EngineConfig, Snapshot, decide
from rules.engine.forecast import (
    Duration,
    DurationModel,
    Expected,
    Finished,
    PreemptionRules,
    alternatives,
    forecast,
    name_pattern,
)
from rules.engine.reasons import ReasonCode
from tests.scheduling.engine.builders import (
    NOW,
    a_cluster,
    a_job,
    a_snapshot,
    running,
)

HOUR = Duration(expected=timedelta(hours=1), basis="a guess")
NODE = "east-a100-80gb-{}"


def ends_in(**minutes: float) -> dict[str, Expected]:
    return {
        job: Expected(end=NOW + timedelta(minutes=m), basis=f"{job}'s median")
        for job, m in minutes.items()
    }


def runs(job: str, team: str, node: int, gpus: int = 8, **kw: object) -> object:
    return running(
        job,
        team=team,
        cluster="east",
        model="a100-80gb",
        nodes=[NODE.format(node)],
        gpus=gpus,
        **kw,  # type: ignore[arg-type]
    )


def test_a_job_that_fits_now_is_estimated_now_on_the_engines_choice() -> None:
    snap = (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 1))
        .with_quota("alice", "a100-80gb", 8)
        .with_pending(a_job("j1", gpus=4))
        .build()
    )
    f = forecast(snap, ends={}, durations={}, default=HOUR).jobs["j1"]
    admitted = decide(snap).admissions[0]
    assert (f.start, f.model, f.cluster) == (NOW, admitted.model, admitted.cluster)
    assert "next cycle" in f.why and "not a promise" in f.why


def test_a_start_carries_the_range_of_the_runs_it_waits_on_through_a_chain() -> None:
    snap = (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 1))
        .with_quota("alice", "a100-80gb", 8)
        .with_running(runs("r1", "alice", 0))
        .with_pending(a_job("j1", gpus=8), a_job("j2", gpus=8))
        .build()
    )
    m = timedelta(minutes=1)
    ends = {
        "r1": Expected(
            end=NOW + 40 * m, basis="b", earliest=NOW + 30 * m, latest=NOW + 70 * m, runs=12
        )
    }
    durations = {
        "j1": Duration(expected=60 * m, basis="d", low=40 * m, high=100 * m, runs=5),
        "j2": HOUR,
    }
    jobs = forecast(snap, ends=ends, durations=durations, default=HOUR).jobs
    j1, j2 = jobs["j1"], jobs["j2"]
    assert (j1.earliest, j1.start, j1.latest) == (NOW + 30 * m, NOW + 40 * m, NOW + 70 * m)
    assert j1.runs == 12 and not j1.unknown
    # j2 waits on j1: its range adds j1's runtime range to j1's start range.
    assert (j2.earliest, j2.start, j2.latest) == (NOW + 70 * m, NOW + 100 * m, NOW + 170 * m)
    assert j2.runs == 5


def test_a_job_waiting_on_a_run_that_outlived_what_was_learned_is_unknown() -> None:
    snap = (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 1))
        .with_quota("alice", "a100-80gb", 8)
        .with_running(runs("r1", "alice", 0))
        .with_pending(a_job("j1", gpus=8))
        .build()
    )
    ends = {
        "r1": Expected(
            end=NOW + timedelta(minutes=5),
            basis="b",
            earliest=NOW,
            latest=NOW + timedelta(hours=20),
            runs=12,
            outlived=True,
        )
    }
    j1 = forecast(snap, ends=ends, durations={}, default=HOUR).jobs["j1"]
    assert j1.unknown and j1.latest == NOW + timedelta(hours=20) and j1.earliest == NOW


def test_a_job_starts_when_the_running_job_on_its_gpus_is_expected_to_end() -> None:
    snap = (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 1))
        .with_quota("alice", "a100-80gb", 8)
        .with_running(runs("r1", "alice", 0))
        .with_pending(a_job("j1", gpus=8))
        .build()
    )
    f = forecast(snap, ends=ends_in(r1=40), durations={}, default=HOUR).jobs["j1"]
    assert f.start == NOW + timedelta(minutes=40)
    assert "once job r1 ends" in f.why and "r1's median" in f.why


def test_an_estimate_names_a_job_of_its_own_team_first_and_others_only_by_team() -> None:
    # Two 8-GPU nodes freed in the same minute, first by bob's job b0, then by alice's z1:
    # alice's 16-GPU gang waits for both; her estimate names her own job and counts bob's.
    snap = (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 2))
        .with_quota("alice", "a100-80gb", 16)
        .with_quota("bob", "a100-80gb", 8)
        .with_running(runs("b0", "bob", 0), runs("z1", "alice", 1))
        .with_pending(a_job("j1", team="alice", gpus=8, replicas=2))
        .build()
    )
    f = forecast(snap, ends=ends_in(b0=40, z1=40), durations={}, default=HOUR)
    why = f.jobs["j1"].why
    assert "once job z1 and 1 other job end" in why and "z1's median" in why
    assert "b0" not in why


def test_jobs_ahead_run_first_and_their_own_runtime_delays_the_next() -> None:
    # One node: j1 (older) waits for r1 (40 min), runs 2 h, then j2 gets the node.
    snap = (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 1))
        .with_quota("alice", "a100-80gb", 8)
        .with_running(runs("r1", "alice", 0))
        .with_pending(a_job("j1", gpus=8).submitted(30), a_job("j2", gpus=8).submitted(20))
        .build()
    )
    durations = {"j1": Duration(expected=timedelta(hours=2), basis="j1's median")}
    jobs = forecast(snap, ends=ends_in(r1=40), durations=durations, default=HOUR).jobs
    assert jobs["j1"].start == NOW + timedelta(minutes=40)
    assert jobs["j2"].start == NOW + timedelta(minutes=160)


def test_a_gang_waits_until_enough_whole_nodes_free_not_just_enough_gpus() -> None:
    # Two nodes each half busy: 8 GPUs free in total, yet no node has 8 for one replica of
    # the gang (2 x 8) until both running jobs end; the later end decides.
    snap = (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 2))
        .with_quota("alice", "a100-80gb", 16)
        .with_running(runs("r0", "alice", 0, gpus=4), runs("r1", "alice", 1, gpus=4))
        .with_pending(a_job("gang", gpus=8, replicas=2))
        .build()
    )
    f = forecast(snap, ends=ends_in(r0=10, r1=90), durations={}, default=HOUR).jobs["gang"]
    assert f.start == NOW + timedelta(minutes=90)


def _one_borrower() -> Snapshot:
    # One 8-GPU node: bob (no quota of his own) runs b1 on alice's idle quota; alice's a1
    # needs the node and is within her nominal.
    return (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 1))
        .with_quota("alice", "a100-80gb", 8)
        .with_quota("bob", "a100-80gb", 0)
        .with_running(runs("b1", "bob", 0))
        .with_pending(a_job("a1", team="alice", gpus=8))
        .build()
    )


def test_a_team_within_nominal_reclaims_from_a_borrower_at_once() -> None:
    # bob borrows alice's idle quota; alice's job reclaims it now (preemption), not when
    # bob's job would have ended.
    snap = _one_borrower()
    f = forecast(snap, ends=ends_in(b1=300), durations={}, default=HOUR).jobs["a1"]
    # The victim keeps its GPUs through its grace period (a minute unless the rules say).
    assert f.start == NOW + timedelta(minutes=1)
    # b1 is bob's: alice's estimate names its team, never the job itself.
    assert "once a job of team bob ends" in f.why and "preempted to reclaim its GPUs" in f.why
    assert "b1" not in f.why
    slow = PreemptionRules(team_grace={"bob": timedelta(minutes=5)})
    f = forecast(snap, ends=ends_in(b1=300), durations={}, default=HOUR, rules=slow).jobs["a1"]
    assert f.start == NOW + timedelta(minutes=5)
    no_reclaim = forecast(
        snap, EngineConfig(preemption=False), ends=ends_in(b1=300), durations={}, default=HOUR
    ).jobs["a1"]
    assert no_reclaim.start == NOW + timedelta(minutes=300)


def _borrower_then_reclaimer() -> Snapshot:
    # Two 8-GPU nodes. alice's r1 holds node 0 for 30 minutes; bob (no quota of his own)
    # borrows alice's idle quota for b1 on node 1 now; when r1 ends, alice's 16-GPU gang is
    # within her nominal and reclaims node 1 from b1.
    return (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 2))
        .with_quota("alice", "a100-80gb", 16)
        .with_quota("bob", "a100-80gb", 0)
        .with_running(runs("r1", "alice", 0))
        .with_pending(
            a_job("b1", team="bob", gpus=8).submitted(20),
            a_job("a2", team="alice", gpus=8, replicas=2).submitted(10),
        )
        .build()
    )


def test_a_job_the_simulation_starts_is_protected_for_its_teams_minimum_runtime() -> None:
    snap = _borrower_then_reclaimer()
    long = {"b1": Duration(expected=timedelta(hours=3), basis="b1's median")}
    plain = forecast(snap, ends=ends_in(r1=30), durations=long, default=HOUR).jobs
    assert plain["a2"].start == NOW + timedelta(minutes=31)  # r1 ends, b1 gets a minute
    # b1 leaves the queue now (its estimate), though it is reclaimed later.
    assert plain["b1"].start == NOW
    rules = PreemptionRules(team_min_runtime={"bob": timedelta(minutes=60)})
    kept = forecast(snap, ends=ends_in(r1=30), durations=long, default=HOUR, rules=rules).jobs
    # b1 started now is protected for an hour: alice waits for that, then its grace.
    assert kept["a2"].start == NOW + timedelta(minutes=61)
    assert "once a job of team bob ends" in kept["a2"].why
    assert kept["b1"].start == NOW
    others = PreemptionRules(team_min_runtime={"carol": timedelta(minutes=60)})
    same = forecast(snap, ends=ends_in(r1=30), durations=long, default=HOUR, rules=others).jobs
    assert same == plain


def test_a_simulated_reclaim_agrees_step_by_step_with_the_plain_engine() -> None:
    snap = _borrower_then_reclaimer()
    for rules in (PreemptionRules(), PreemptionRules(min_runtime=timedelta(minutes=45))):
        quick = forecast(snap, ends=ends_in(r1=30), durations={}, default=HOUR, rules=rules)
        plain = forecast(
            snap, ends=ends_in(r1=30), durations={}, default=HOUR, rules=rules, worded=True
        )
        assert quick.jobs == plain.jobs and quick.steps == plain.steps


@pytest.mark.parametrize(
    ("alice_ago", "bob_ago", "first"),
    [(30, 20, "a"), (20, 30, "b")],
    ids=["equal shares: the older submit goes first", "and the other way round"],
)
def test_ties_in_share_go_to_the_older_submit(alice_ago: int, bob_ago: int, first: str) -> None:
    snap = (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 1))
        .with_quota("alice", "a100-80gb", 4)
        .with_quota("bob", "a100-80gb", 4)
        .with_running(runs("r1", "alice", 0, gpus=8))
        .with_pending(
            a_job("a", team="alice", gpus=8).submitted(alice_ago),
            a_job("b", team="bob", gpus=8).submitted(bob_ago),
        )
        .build()
    )
    jobs = forecast(snap, ends=ends_in(r1=30), durations={}, default=HOUR).jobs
    second = "b" if first == "a" else "a"
    assert jobs[first].start == NOW + timedelta(minutes=30)
    assert jobs[second].start == NOW + timedelta(minutes=90)


def test_a_job_that_can_never_start_says_why_instead_of_a_time() -> None:
    snap = (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 1))
        .with_quota("alice", "a100-80gb", 16)
        .with_pending(a_job("huge", gpus=8, replicas=3))
        .build()
    )
    f = forecast(snap, ends={}, durations={}, default=HOUR).jobs["huge"]
    assert f.start is None
    assert f.why.startswith("no estimate: even after every running job has ended")
    assert "A100-80GB" in f.why


def test_beyond_the_horizon_there_is_no_estimate_and_it_says_so() -> None:
    snap = (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 1))
        .with_quota("alice", "a100-80gb", 8)
        .with_running(runs("r1", "alice", 0))
        .with_pending(a_job("j1", gpus=8))
        .build()
    )
    f = forecast(
        snap, ends=ends_in(r1=600), durations={}, default=HOUR, horizon=timedelta(hours=2)
    ).jobs["j1"]
    assert f.start is None and "no estimate within the next" in f.why


def test_alternatives_estimate_each_candidate_model_and_fewer_replicas() -> None:
    # A100 is busy for 2 h; the T4 node is free: a job that takes either sees both.
    snap = (
        a_snapshot()
        .with_clusters(
            a_cluster("east").with_nodes("a100-80gb", 2).with_nodes("t4", 1, gpus=4),
        )
        .with_quota("alice", "a100-80gb", 16)
        .with_quota("alice", "t4", 4)
        .with_running(runs("r0", "alice", 0), runs("r1", "alice", 1, gpus=4))
        .with_pending(a_job("j", gpus=4, replicas=2).on_models("a100-80gb", "t4"))
        .build()
    )
    alts = {
        a.label: a
        for a in alternatives(
            snap, snap.pending[0], ends=ends_in(r0=120, r1=30), durations={}, default=HOUR
        )
    }
    assert set(alts) == {"A100-80GB", "T4", "1 replica instead of 2"}
    assert alts["A100-80GB"].estimate.start == NOW + timedelta(minutes=30)
    assert alts["T4"].estimate.start is None  # 2 x 4 never fits one 4-GPU node
    assert alts["1 replica instead of 2"].estimate.start == NOW


def test_durations_come_from_the_narrowest_group_shrunk_toward_the_wider() -> None:
    def run(team: str, name: str, minutes: int, shape: str = "1x1") -> Finished:
        return Finished(
            team=team,
            kind="training",
            pattern=name_pattern(name, "reg/bert:1.0"),
            runtime=timedelta(minutes=minutes),
            shape=shape,
        )

    model = DurationModel(
        [run("alice", f"bert-{i}", 30) for i in range(12)]
        + [run("alice", "gpt", 300) for _ in range(12)]
        + [run("bob", "x", 10, "2x8"), run("bob", "y", 12, "2x8")]
    )
    cap = timedelta(hours=24)
    same = model.expected(
        team="alice",
        kind="training",
        pattern=name_pattern("bert-99", "reg/bert:2"),
        max_runtime=cap,
    )
    # 12 runs of the same job: close to their 30 minutes, pulled a little toward the team's.
    assert timedelta(minutes=30) <= same.expected < timedelta(minutes=45)
    assert same.runs == 12 and "like it" in same.basis
    assert same.low is not None and same.high is not None
    assert same.low < same.expected < same.high
    # One run of a new job moves the team's estimate, it does not replace it.
    one = DurationModel([*model_runs(run), run("alice", "new", 600)])
    new = one.expected(
        team="alice", kind="training", pattern=name_pattern("new", "reg/bert:1"), max_runtime=cap
    )
    team_only = one.expected(team="alice", kind="training", pattern="z|z", max_runtime=cap)
    assert team_only.expected < new.expected < timedelta(minutes=600)
    assert "weighed with" in new.basis
    # Another team's job of a shape the pool has run: learned from that shape.
    shaped = model.expected(
        team="carol", kind="training", pattern="z|z", max_runtime=cap, shape="2x8"
    )
    assert shaped.runs == 2 and "2 x 8-GPU" in shaped.basis
    bounded = model.expected(
        team="alice", kind="training", pattern="other|x", max_runtime=timedelta(minutes=20)
    )
    assert bounded.expected == timedelta(minutes=20) and "max runtime" in bounded.basis
    assert bounded.high == timedelta(minutes=20)
    # Nothing learned: a wide range, said so, not the max runtime as a point.
    unknown = DurationModel([]).expected(
        team="carol", kind="inference", pattern="a|b", max_runtime=cap
    )
    assert unknown.runs == 0 and not unknown.learned
    assert unknown.expected < cap and unknown.high == cap
    assert unknown.low is not None and unknown.low <= timedelta(minutes=5)
    assert "no finished runs" in unknown.basis


def model_runs(run: Any) -> list[Finished]:
    return [run("alice", "gpt", 300) for _ in range(12)]


def _random_pool(seed: int) -> tuple[Snapshot, dict[str, Expected], dict[str, Duration]]:
    """Three clusters of A100 and T4 nodes half busy, five teams with quotas that do not add
    up to the pool (so some borrow, some reclaim), 120 queued jobs of every shape."""
    rnd = random.Random(seed)
    builder = a_snapshot()
    for c in ("east", "west", "north"):
        builder.with_clusters(a_cluster(c).with_nodes("a100-80gb", 4).with_nodes("t4", 3, gpus=4))
    teams = [f"team-{i}" for i in range(5)]
    for t in teams:
        builder.with_quota(t, "a100-80gb", rnd.choice([0, 8, 16, 24]))
        builder.with_quota(t, "t4", rnd.choice([0, 4, 8]))
    ends: dict[str, Expected] = {}
    for c in ("east", "west", "north"):
        for i in range(4):
            if rnd.random() < 0.6:
                job = f"r-{c}-{i}"
                builder.with_running(
                    running(
                        job,
                        team=rnd.choice(teams),
                        cluster=c,
                        model="a100-80gb",
                        nodes=[f"{c}-a100-80gb-{i}"],
                        gpus=rnd.choice([4, 8]),
                        started_minutes_ago=rnd.randint(1, 300),
                    )
                )
                ends[job] = Expected(end=NOW + timedelta(minutes=rnd.randint(1, 400)), basis="b")
    durations = {}
    for n in range(120):
        job = a_job(
            f"q{n:03}",
            team=rnd.choice(teams),
            gpus=rnd.choice([1, 2, 4, 8]),
            replicas=rnd.choice([1, 1, 2]),
        ).submitted(rnd.randint(0, 400))
        if rnd.random() < 0.4:
            job = job.on_models(*rnd.sample(["a100-80gb", "t4"], rnd.choice([1, 2])))
        if rnd.random() < 0.2:
            job = job.priority(10)
        builder.with_pending(job)
        durations[f"q{n:03}"] = Duration(expected=timedelta(minutes=rnd.randint(5, 300)), basis="d")
    return builder.build(), ends, durations


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_simulating_without_wording_every_step_changes_no_estimate(seed: int) -> None:
    snap, ends, durations = _random_pool(seed)
    quick = forecast(snap, ends=ends, durations=durations, default=HOUR)
    worded = forecast(snap, ends=ends, durations=durations, default=HOUR, worded=True)
    assert quick.jobs == worded.jobs
    assert any(f.start is not None and f.start > NOW for f in quick.jobs.values())


def _quota_bound_pool(seed: int) -> tuple[Snapshot, dict[str, Expected], dict[str, Duration]]:
    """Teams in two cohorts at or near their quota (small borrowing and lending limits, one
    team with none at all, one held), deep lines with starving heads: most queued jobs cannot
    start on quota, the case the simulation leaves out of its steps."""
    rnd = random.Random(seed)
    builder = a_snapshot()
    for c in ("east", "west"):
        builder.with_clusters(a_cluster(c).with_nodes("a100-80gb", 3).with_nodes("t4", 3, gpus=4))
    teams = [f"team-{i}" for i in range(6)]
    for i, t in enumerate(teams):
        builder.with_team(t, cohort=f"c{i % 2}", held=i == 5)
        builder.with_quota(
            t,
            "a100-80gb",
            rnd.choice([0, 8, 16]),
            borrowing=rnd.choice([None, 0, 8]),
            lending=rnd.choice([None, 0, 4]),
        )
        if i != 4:  # team-4 has no T4 quota row: nominal 0, only what its cohort lends
            builder.with_quota(t, "t4", rnd.choice([0, 4, 8]), borrowing=rnd.choice([None, 4]))
    builder.with_cohort_quota("c1", "t4", 4)
    ends: dict[str, Expected] = {}
    for c in ("east", "west"):
        for i in range(3):
            job = f"r-{c}-{i}"
            builder.with_running(
                running(
                    job,
                    team=rnd.choice(teams[:5]),
                    cluster=c,
                    model="a100-80gb",
                    nodes=[f"{c}-a100-80gb-{i}"],
                    gpus=8,
                    started_minutes_ago=rnd.randint(1, 300),
                )
            )
            ends[job] = Expected(end=NOW + timedelta(minutes=rnd.randint(1, 300)), basis="b")
    durations = {}
    for n in range(150):
        job = a_job(
            f"q{n:03}",
            team=rnd.choice(teams),
            gpus=rnd.choice([1, 2, 4, 8]),
            replicas=rnd.choice([1, 1, 2]),
        ).submitted(rnd.randint(0, 400))
        if rnd.random() < 0.5:
            job = job.on_models(*rnd.sample(["a100-80gb", "t4"], rnd.choice([1, 2])))
        if rnd.random() < 0.15:
            job = job.priority(10)
        builder.with_pending(job)
        durations[f"q{n:03}"] = Duration(expected=timedelta(minutes=rnd.randint(5, 300)), basis="d")
    return builder.build(), ends, durations


@pytest.mark.parametrize("seed", [1, 3, 4])
def test_leaving_quota_bound_jobs_out_of_a_step_changes_no_estimate(seed: int) -> None:
    # worded=True runs the plain decide() over the whole queue at every step.
    snap, ends, durations = _quota_bound_pool(seed)
    config = EngineConfig(lookback_per_team=12, preemption_budget_gpus=16)
    blocked = {r.code for r in decide(snap, config).pending}
    assert blocked & {ReasonCode.QUOTA_EXHAUSTED, ReasonCode.COHORT_HAS_NOTHING_TO_LEND}
    quick = forecast(snap, config, ends=ends, durations=durations, default=HOUR)
    plain = forecast(snap, config, ends=ends, durations=durations, default=HOUR, worded=True)
    assert quick.jobs == plain.jobs and quick.steps == plain.steps
    assert any(f.start is not None and f.start > NOW for f in quick.jobs.values())


def test_a_victim_admitted_again_and_reclaimed_again_stops_at_the_step_budget() -> None:
    # Seed 2: a queued borrower is preempted for a reclaimer, requeued, admitted again at the
    # same instant and preempted again; re-deciding after a preemption used to skip the
    # budget, so the simulation never ended.
    snap, ends, durations = _quota_bound_pool(2)
    config = EngineConfig(lookback_per_team=12, preemption_budget_gpus=16)
    result = forecast(snap, config, ends=ends, durations=durations, default=HOUR, max_steps=50)
    assert result.steps == 50
    assert any("step budget" in f.why for f in result.jobs.values())


def test_protections_ending_within_a_step_are_all_over_at_that_step() -> None:
    # bob's two borrowed jobs are protected for 60 and 60.5 minutes; alice's gang needs both
    # nodes. The step that takes both in must come after both, or the later one would still
    # hold and alice would wait for the jobs' ends, hours away.
    def protected(job: str, node: int, minutes: float) -> object:
        until = NOW + timedelta(minutes=minutes)
        return replace(runs(job, "bob", node), protected_until=until)  # type: ignore[type-var]

    snap = (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 2))
        .with_quota("alice", "a100-80gb", 16)
        .with_quota("bob", "a100-80gb", 0)
        .with_running(protected("b1", 0, 60), protected("b2", 1, 60.5))
        .with_pending(a_job("a1", team="alice", gpus=8, replicas=2))
        .build()
    )
    f = forecast(snap, ends=ends_in(b1=300, b2=300), durations={}, default=HOUR).jobs["a1"]
    assert f.start == NOW + timedelta(minutes=61, seconds=30)  # the later protection + grace


def test_a_victim_due_to_end_within_its_grace_period_ends_when_due() -> None:
    snap = _one_borrower()
    rules = PreemptionRules(grace=timedelta(minutes=30))
    f = forecast(snap, ends=ends_in(b1=2), durations={}, default=HOUR, rules=rules).jobs["a1"]
    assert f.start == NOW + timedelta(minutes=2)


def test_a_requeued_job_keeps_its_first_start_when_the_simulation_stops_early() -> None:
    snap = _borrower_then_reclaimer()
    long = {"b1": Duration(expected=timedelta(hours=3), basis="b1's median")}
    short = forecast(
        snap, ends=ends_in(r1=30), durations=long, default=HOUR, horizon=timedelta(minutes=45)
    ).jobs
    assert short["b1"].start == NOW  # started now, reclaimed at 31 minutes: still pending then


def _busy_pool(
    seed: int,
) -> tuple[Snapshot, dict[str, Expected], dict[str, Duration], EngineConfig, PreemptionRules]:
    """A random pool with all the rules at play: cohorts with lending and borrowing limits,
    cohort quotas, usage, protected and preempting running jobs, fallback, priorities,
    starving heads that hold room, a preemption budget and preemption rules."""
    rnd = random.Random(seed * 7919 + 13)
    b = a_snapshot()
    clusters = ["east", "west", "north"][: rnd.choice([1, 2, 2, 3])]
    a100s, t4s = rnd.choice([2, 3, 4, 6]), rnd.choice([0, 2, 4])
    for c in clusters:
        cluster = a_cluster(c).with_nodes("a100-80gb", a100s, gpus=4 if rnd.random() < 0.2 else 8)
        b.with_clusters(cluster.with_nodes("t4", t4s, gpus=4) if t4s else cluster)
    teams = [f"t{i}" for i in range(rnd.choice([3, 4, 5]))]
    for team in teams:
        b.with_team(team, cohort=rnd.choice(["c0", "c1"]), weight=rnd.choice([1.0, 2.0, 0.5]))
        b.with_quota(
            team,
            "a100-80gb",
            rnd.choice([0, 4, 8, 16, 24, 32]),
            borrowing=rnd.choice([None, None, 0, 8, 16]),
            lending=rnd.choice([None, None, 0, 4, 8]),
        )
        if t4s and rnd.random() < 0.8:
            b.with_quota(
                team, "t4", rnd.choice([0, 4, 8]), borrowing=rnd.choice([None, 4]),
                lending=rnd.choice([None, 4]),
            )  # fmt: skip
    for cohort in ("c0", "c1"):
        if rnd.random() < 0.4:
            b.with_cohort_quota(cohort, "a100-80gb", rnd.choice([8, 16, 32]))
        if t4s and rnd.random() < 0.4:
            b.with_cohort_quota(cohort, "t4", 4)
    if rnd.random() < 0.3:
        b.with_usage(rnd.choice(teams), "a100-80gb", rnd.uniform(0, 500))
    ends: dict[str, Expected] = {}
    for c in clusters:
        for i in range(a100s):
            used = 0
            while rnd.random() < 0.75:
                g = rnd.choice([1, 2, 4, 8])
                if used + g > 8:
                    break
                used += g
                job = f"r{len(ends)}"
                alloc = running(
                    job, team=rnd.choice(teams), cluster=c, model="a100-80gb",
                    nodes=[f"{c}-a100-80gb-{i}"], gpus=g, priority=rnd.choice([0, 0, 5]),
                    started_minutes_ago=rnd.randint(1, 300), preempting=rnd.random() < 0.05,
                )  # fmt: skip
                if rnd.random() < 0.3:
                    until = NOW + timedelta(minutes=rnd.randint(1, 120))
                    alloc = replace(alloc, protected_until=until)
                b.with_running(alloc)
                ends[job] = Expected(end=NOW + timedelta(minutes=rnd.randint(1, 400)), basis="b")
    durations: dict[str, Duration] = {}
    for n in range(rnd.choice([15, 40, 80, 150])):
        job = a_job(
            f"q{n:03}", team=rnd.choice(teams), gpus=rnd.choice([1, 2, 2, 3, 4, 8]),
            replicas=rnd.choice([1, 1, 2, 3]),
        ).submitted(rnd.randint(0, 400))  # fmt: skip
        if rnd.random() < 0.5:
            job = job.on_models(*rnd.sample(["a100-80gb", "t4"], rnd.choice([1, 2])))
        if rnd.random() < 0.1:
            job = job.no_fallback()
        if rnd.random() < 0.25:
            job = job.priority(rnd.choice([5, 10]))
        b.with_pending(job)
        durations[f"q{n:03}"] = Duration(expected=timedelta(minutes=rnd.randint(1, 300)), basis="d")
    config = EngineConfig(
        lookback_per_team=rnd.choice([2, 5, 12, 1000]),
        starvation_wait=timedelta(minutes=rnd.choice([0, 5, 30, 120])),
        preemption=rnd.random() < 0.9,
        preemption_budget_gpus=rnd.choice([None, None, 4, 8, 16]),
        max_capacity_holds=rnd.choice([1, 2, 4]),
    )
    rules = PreemptionRules(
        min_runtime=timedelta(minutes=rnd.choice([0, 0, 10, 30, 60])),
        team_min_runtime={teams[0]: timedelta(minutes=45)} if rnd.random() < 0.3 else {},
        grace=timedelta(minutes=rnd.choice([0, 1, 5])),
        team_grace={teams[1]: timedelta(minutes=3)} if rnd.random() < 0.2 else {},
    )
    return b.build(), ends, durations, config, rules


# 1730: a job passed over in the nominal pass while room was held for a starving job
# made a later one reclaim where the engine did not (how a capacity failure was worded then
# depended on which job of its shape was asked first; it is now read for each). The others:
# a spread of seeds.
@pytest.mark.parametrize("seed", [1730, *range(20)])
def test_a_simulation_with_every_rule_at_play_is_the_plain_engines(seed: int) -> None:
    snap, ends, durations, config, rules = _busy_pool(seed)
    common = {"ends": ends, "durations": durations, "default": HOUR, "rules": rules}
    quick = forecast(snap, config, max_steps=150, **common)  # type: ignore[arg-type]
    plain = forecast(snap, config, max_steps=150, worded=True, **common)  # type: ignore[arg-type]
    assert quick.steps == plain.steps
    # A job left without an estimate is worded by one more decision after the last step
    # (its reason may then say a reclaim for it is under way): compare what it would get.
    assert {k: (f.start, f.model, f.cluster) for k, f in quick.jobs.items()} == {
        k: (f.start, f.model, f.cluster) for k, f in plain.jobs.items()
    }
    assert all(quick.jobs[k] == f for k, f in plain.jobs.items() if f.start is not None)
