"""Every pending reason code, its message with the numbers, and admission explanations."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

import pytest

from rules.engine import (
    ClusterNoteCode,
    EngineConfig,
    Policy,
    ReasonCode,
    RunningAllocation,
    SkipCode,
    decide,
)
from rules.engine.snapshot import Snapshot
from tests.scheduling.engine.builders import (
    CATALOG,
    NOW,
    a_cluster,
    a_job,
    a_snapshot,
    admitted,
    fast_guard,
    reasons_by_job,
    running,
)

X = "\u00d7"


def busy(
    gpus: int, node: str = "east-a100-80gb-0", team: str = "carol", job: str = "r"
) -> RunningAllocation:
    return running(job, team=team, cluster="east", model="a100-80gb", nodes=[node], gpus=gpus)


@dataclass
class Case:
    id: str
    snapshot: Snapshot
    code: ReasonCode
    message: str
    """The whole message, or a fragment when it ends in '...'."""
    config: EngineConfig = field(default_factory=EngineConfig)
    job: str = "j"


A100_8 = a_cluster().with_nodes("a100-80gb", 1, gpus=8)

CASES = [
    Case(
        "team held",
        a_snapshot()
        .with_clusters(A100_8)
        .with_team("alice", held=True)
        .with_pending(a_job("j"))
        .build(),
        ReasonCode.TEAM_HELD,
        "team alice's queue is held by an admin; running jobs continue",
    ),
    Case(
        "unknown team is invalid",
        Snapshot(now=NOW, models=CATALOG, teams=(), pending=(a_job("j").build(),)),
        ReasonCode.INVALID_JOB,
        "the job cannot be scheduled: team 'alice' is unknown",
    ),
    Case(
        "requirement matches no model",
        a_snapshot()
        .with_clusters(A100_8)
        .with_pending(a_job("j").needs(memory_gib=100, fp8=True))
        .build(),
        ReasonCode.NO_MODEL_MATCHES,
        "the requirement matches none of the 5 models in the catalog (T4: does not meet...",
    ),
    Case(
        "too large for any node",
        a_snapshot()
        .with_clusters(A100_8)
        .with_quota("alice", "a100-80gb", 16)
        .with_pending(a_job("j", gpus=16).on_models("a100-80gb"))
        .build(),
        ReasonCode.JOB_TOO_LARGE,
        f"needs 16 {X} A100-80GB; needs 16 GPUs per replica; the largest node has 8",
    ),
    Case(
        "no cluster has the model",
        a_snapshot().with_clusters(A100_8).with_pending(a_job("j").on_models("t4")).build(),
        ReasonCode.NO_ENABLED_CLUSTER,
        f"needs 1 {X} T4; no cluster has nodes of this model",
    ),
    Case(
        "cluster draining",
        a_snapshot()
        .with_clusters(a_cluster("old").with_nodes("a100-80gb", 1).draining())
        .with_quota("alice", "a100-80gb", 8)
        .with_pending(a_job("j").on_models("a100-80gb"))
        .build(),
        ReasonCode.CLUSTER_DRAINING,
        f"needs 1 {X} A100-80GB; its clusters are draining (old) and take nothing new",
    ),
    Case(
        "cluster unreachable",
        a_snapshot()
        .with_clusters(a_cluster("far").with_nodes("a100-80gb", 1).unreachable())
        .with_quota("alice", "a100-80gb", 8)
        .with_pending(a_job("j").on_models("a100-80gb"))
        .build(),
        ReasonCode.CLUSTER_UNREACHABLE,
        f"needs 1 {X} A100-80GB; its clusters cannot be reached (far) and take nothing new "
        "until they answer",
    ),
    Case(
        "unreachable explains more than a model no cluster has",
        a_snapshot()
        .with_clusters(a_cluster("far").with_nodes("a100-80gb", 1).unreachable())
        .with_quota("alice", "a100-80gb", 8)
        .with_quota("alice", "t4", 8)
        .with_pending(a_job("j").on_models("t4", "a100-80gb"))
        .build(),
        ReasonCode.CLUSTER_UNREACHABLE,
        f"needs 1 {X} A100-80GB; its clusters cannot be reached (far) and take nothing new "
        "until they answer",
    ),
    Case(
        "quota exhausted",
        a_snapshot()
        .with_clusters(A100_8)
        .with_quota("alice", "a100-80gb", 8, borrowing=0)
        .with_running(busy(6, team="alice"))
        .with_pending(a_job("j", gpus=2, replicas=2).on_models("a100-80gb"))
        .build(),
        ReasonCode.QUOTA_EXHAUSTED,
        (
            f"needs 2 replicas {X} 2 A100-80GB; team quota full: 2 more than the team may "
            "use (it uses 6 of 8 nominal, borrowing limit 0)"
        ),
    ),
    Case(
        "cohort has nothing to lend",
        a_snapshot()
        .with_clusters(A100_8)
        .with_quota("alice", "a100-80gb", 6)
        .with_quota("bob", "a100-80gb", 2)
        .with_running(busy(6, team="alice"), busy(2, team="bob", job="rb"))
        .with_pending(a_job("j", gpus=8).on_models("a100-80gb"))
        .build(),
        ReasonCode.COHORT_HAS_NOTHING_TO_LEND,
        (
            f"needs 8 {X} A100-80GB; "
            "cohort has nothing to lend: this job would borrow 8 (the team uses 6 of 6 "
            "nominal, borrowing limit none)"
        ),
    ),
    Case(
        "cohort has too little to lend: the shortfall, not the job's size",
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 3, gpus=8))
        .with_quota("alice", "a100-80gb", 6)
        .with_quota("bob", "a100-80gb", 4)
        .with_running(busy(6, team="alice"), busy(2, team="bob", job="rb"))
        .with_pending(a_job("j", gpus=8).on_models("a100-80gb"))
        .build(),
        ReasonCode.COHORT_HAS_NOTHING_TO_LEND,
        (
            f"needs 8 {X} A100-80GB; "
            "cohort has too little to lend: it can lend 2 of the 8 this job would borrow, 6 "
            "short (the team uses 6 of 6 nominal, borrowing limit none)"
        ),
    ),
    Case(
        "no capacity",
        a_snapshot()
        .with_clusters(A100_8)
        .with_quota("alice", "a100-80gb", 8)
        .with_quota("carol", "a100-80gb", 8)
        .with_running(busy(6))
        .with_pending(a_job("j", gpus=4).on_models("a100-80gb"))
        .build(),
        ReasonCode.NO_CAPACITY,
        (
            f"needs 4 {X} A100-80GB; no node with 4 free (largest free block 2 in east, "
            f"2 free in enabled clusters)"
        ),
    ),
    Case(
        "waiting behind jobs that took the room this cycle",
        a_snapshot()
        .with_clusters(A100_8)
        .with_quota("alice", "a100-80gb", 16)
        .with_pending(
            a_job("first", gpus=8).on_models("a100-80gb").submitted(20),
            a_job("j", gpus=4).on_models("a100-80gb"),
        )
        .build(),
        ReasonCode.WAITING_BEHIND,
        (
            f"needs 4 {X} A100-80GB; "
            f"waiting behind 1 job ahead in line (higher priority or lower team share); "
            f"1 admitted this cycle took the room it would have fitted"
        ),
    ),
    Case(
        "capacity held for an older job",
        a_snapshot()
        .with_clusters(A100_8)
        .with_cohort_quota("default", "a100-80gb", 16)
        .with_running(busy(2))
        .with_pending(
            a_job("old", team="bob", gpus=8).on_models("a100-80gb").submitted(300),
            a_job("j", gpus=4).on_models("a100-80gb"),
        )
        .build(),
        ReasonCode.CAPACITY_HELD,
        (
            f"needs 4 {X} A100-80GB; the room is held for an older job of team bob (starvation "
            f"guard, 6 GPUs held)"
        ),
        fast_guard(60),
    ),
    Case(
        "capacity held for an older job of the same team",
        a_snapshot()
        .with_clusters(A100_8)
        .with_cohort_quota("default", "a100-80gb", 16)
        .with_running(busy(2))
        .with_pending(
            a_job("old", gpus=8).on_models("a100-80gb").submitted(300),
            a_job("j", gpus=4).on_models("a100-80gb"),
        )
        .build(),
        ReasonCode.CAPACITY_HELD,
        (
            f"needs 4 {X} A100-80GB; the room is held for older job old (starvation guard, "
            f"6 GPUs held)"
        ),
        fast_guard(60),
    ),
    Case(
        "holding capacity",
        a_snapshot()
        .with_clusters(A100_8)
        .with_cohort_quota("default", "a100-80gb", 16)
        .with_running(busy(2))
        .with_pending(a_job("j", gpus=8).on_models("a100-80gb").submitted(300))
        .build(),
        ReasonCode.HOLDING_CAPACITY,
        (
            f"needs 8 {X} A100-80GB; "
            "waited 5h 0m (guard 1h 0m): holding 6 of 8 GPUs on 1 node in east "
            "until running jobs finish; "
            f"later jobs may not use them"
        ),
        fast_guard(60),
    ),
    Case(
        "preempting",
        a_snapshot()
        .with_clusters(A100_8)
        .with_quota("alice", "a100-80gb", 8)
        .with_running(busy(8))
        .with_pending(a_job("j", gpus=8).on_models("a100-80gb"))
        .build(),
        ReasonCode.PREEMPTING,
        (
            f"needs 8 {X} A100-80GB; "
            "preempting 1 job on borrowed quota in east to reclaim nominal quota "
            "(team uses 8 of 8 nominal, "
            f"this job included); admitted once they stop"
        ),
    ),
    Case(
        "borrowers within their minimum runtime",
        a_snapshot()
        .with_clusters(A100_8)
        .with_quota("alice", "a100-80gb", 8)
        .with_running(replace(busy(8), protected_until=NOW + timedelta(minutes=90)))
        .with_pending(a_job("j", gpus=8).on_models("a100-80gb"))
        .build(),
        ReasonCode.MIN_RUNTIME,
        (
            f"needs 8 {X} A100-80GB; jobs on borrowed quota that would make room are within "
            "their team's minimum runtime until 13:30 UTC (in 1h 30m); reclaimed then"
        ),
    ),
    Case(
        "preemption budget spent",
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 2, gpus=8))
        .with_quota("alice", "a100-80gb", 16)
        .with_running(
            replace(busy(8, job="going"), preempting=True),
            busy(8, node="east-a100-80gb-1", job="r2"),
        )
        .with_pending(
            a_job("first", gpus=8).on_models("a100-80gb").submitted(20),
            a_job("j", gpus=8).on_models("a100-80gb").submitted(10),
        )
        .build(),
        ReasonCode.PREEMPTION_BUDGET,
        (
            f"needs 8 {X} A100-80GB; reclaiming its room would preempt 1 job on borrowed quota "
            "(8 GPUs), more than the preemption budget has left (8 GPUs per cycle, 8 being "
            "preempted already); tried again next cycle"
        ),
        EngineConfig(preemption_budget_gpus=8),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_pending_reason(case: Case) -> None:
    decision = decide(case.snapshot, case.config)
    reason = reasons_by_job(decision)[case.job]
    assert reason.code is case.code
    if case.message.endswith("..."):
        assert reason.message.startswith(case.message[:-3]), reason.message
    else:
        assert reason.message == case.message


def test_every_reason_code_is_covered() -> None:
    covered = {c.code for c in CASES} | {ReasonCode.NOT_CONSIDERED}  # see test_ordering
    assert covered == set(ReasonCode)


def test_pending_candidates_list_every_model_and_why() -> None:
    snap = (
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("v100-32gb", 1, gpus=4).with_nodes("a100-80gb", 1))
        .with_quota("alice", "v100-32gb", 8)
        .with_quota("alice", "a100-80gb", 0, borrowing=0)
        .with_running(
            running(
                "r",
                team="bob",
                cluster="east",
                model="v100-32gb",
                nodes=["east-v100-32gb-0"],
                gpus=2,
            )
        )
        .with_quota("bob", "v100-32gb", 4)
        .with_pending(a_job("j", gpus=4).needs(memory_gib=24).policy(Policy.CHEAPEST))
        .build()
    )
    reason = reasons_by_job(decide(snap))["j"]
    by_model = {n.model: n for n in reason.candidates}
    assert by_model["t4"].message == "T4: does not meet the requirement (16 GiB < 24 GiB)"
    assert by_model["v100-32gb"].message.startswith("V100-32GB: no node with 4 free")
    assert by_model["a100-80gb"].code is SkipCode.QUOTA_FULL
    assert by_model["l4"].code is SkipCode.NO_ENABLED_CLUSTER
    assert reason.code is ReasonCode.NO_CAPACITY
    assert reason.message.endswith("(and 1 other candidate blocked)")


def test_no_capacity_names_the_cluster_with_the_closest_fit() -> None:
    """A user told "largest free block 3" should also learn where it is: the cluster to ask
    about, or to pin the job to. Two clusters, 3 GPUs free in west and 2 in east."""
    snap = (
        a_snapshot()
        .with_clusters(A100_8, a_cluster("west").with_nodes("a100-80gb", 1, gpus=8))
        .with_quota("alice", "a100-80gb", 16)
        .with_quota("carol", "a100-80gb", 16)
        .with_running(
            busy(6),
            running(
                "w",
                team="carol",
                cluster="west",
                model="a100-80gb",
                nodes=["west-a100-80gb-0"],
                gpus=5,
            ),
        )
        .with_pending(a_job("j", gpus=4).on_models("a100-80gb"))
        .build()
    )
    reason = reasons_by_job(decide(snap))["j"]
    assert reason.code is ReasonCode.NO_CAPACITY
    assert reason.message == (
        f"needs 4 {X} A100-80GB; no node with 4 free (largest free block 3 in west, "
        f"5 free in enabled clusters)"
    )


def test_an_admission_explains_the_choice_and_every_skipped_candidate() -> None:
    snap = (
        a_snapshot()
        .with_clusters(
            a_cluster("east").with_nodes("v100-32gb", 1, gpus=4).with_nodes("a100-80gb", 1),
            a_cluster("west").with_nodes("a100-80gb", 2),
            a_cluster("old").with_nodes("a100-80gb", 1).draining(),
        )
        .with_quota("alice", "v100-32gb", 8)
        .with_quota("alice", "l4", 0, borrowing=0)
        .with_quota("alice", "a100-80gb", 16)
        .with_running(
            running(
                "r",
                team="bob",
                cluster="east",
                model="v100-32gb",
                nodes=["east-v100-32gb-0"],
                gpus=2,
            )
        )
        .with_quota("bob", "v100-32gb", 4)
        .with_pending(a_job("j", gpus=4).needs(memory_gib=24))
        .build()
    )
    decision = decide(snap)
    a = admitted(decision)["j"]
    assert (a.cluster, a.model) == ("east", "a100-80gb")
    ex = a.explanation
    assert ex.message.startswith(
        f"admitted 4 {X} A100-80GB in east (first fitting fallback candidate"
    )
    skipped = {n.model: n.message for n in ex.skipped}
    assert skipped["t4"] == "T4: does not meet the requirement (16 GiB < 24 GiB)"
    assert skipped["l4"] == "L4: no cluster has nodes of this model"
    assert skipped["v100-32gb"].startswith("V100-32GB: no node with 4 free (largest free block 2")
    assert skipped["h100-80gb"] == "H100-80GB: not tried, an earlier candidate fitted"
    clusters = {n.cluster: n for n in ex.clusters}
    assert clusters["old"].code is ClusterNoteCode.DRAINING
    assert clusters["west"].code is ClusterNoteCode.WORSE_FIT
    assert clusters["west"].message == (
        "west: worse fit (would leave 4 free on the nodes used and 12 in the cluster; "
        "chosen leaves 4 and 4)"
    )


def test_quota_note_for_a_full_model_in_an_explanation() -> None:
    snap = (
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 1).with_nodes("t4", 1, gpus=4))
        .with_quota("alice", "a100-80gb", 8, borrowing=0)
        .with_quota("alice", "t4", 4)
        .with_running(
            running(
                "r",
                team="alice",
                cluster="east",
                model="a100-80gb",
                nodes=["east-a100-80gb-0"],
                gpus=8,
            )
        )
        .with_pending(a_job("j", gpus=2).on_models("a100-80gb", "t4"))
        .build()
    )
    a = admitted(decide(snap))["j"]
    assert a.model == "t4"
    (note,) = a.explanation.skipped
    assert (
        note.message
        == "A100-80GB: team quota full: 2 more than the team may use (it uses 8 of 8 nominal, "
        "borrowing limit 0)"
    )
