"""Reclaiming nominal quota from borrowers: minimal, lowest priority and newest first, on a copy."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from rules.engine import (
    EngineConfig,
    PreemptionCode,
    ReasonCode,
    RunningAllocation,
    decide,
)
from rules.engine.snapshot import Snapshot
from tests.scheduling.engine.builders import (
    SnapshotBuilder,
    a_cluster,
    a_job,
    a_snapshot,
    admitted,
    preempted,
    reasons_by_job,
    running,
)

NODE0 = "east-a100-80gb-0"
NODE1 = "east-a100-80gb-1"


def bob_runs(
    job: str,
    gpus: int,
    *,
    node: str = NODE0,
    prio: int = 0,
    ago: float = 60,
    preempting: bool = False,
) -> RunningAllocation:
    return running(
        job,
        team="bob",
        cluster="east",
        model="a100-80gb",
        nodes=[node],
        gpus=gpus,
        priority=prio,
        started_minutes_ago=ago,
        preempting=preempting,
    )


def base(nodes: int = 1) -> SnapshotBuilder:
    return (
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", nodes, gpus=8))
        .with_quota("alice", "a100-80gb", 8 * nodes)
        .with_quota("bob", "a100-80gb", 0)
    )


@dataclass
class Case:
    id: str
    snapshot: Snapshot
    want_preempted: set[str]
    want_code: ReasonCode
    config: EngineConfig = field(default_factory=EngineConfig)


CASES = [
    Case(
        "a team within nominal reclaims from a borrower",
        base()
        .with_running(bob_runs("b1", 8))
        .with_pending(a_job("a1", gpus=8).on_models("a100-80gb"))
        .build(),
        {"b1"},
        ReasonCode.PREEMPTING,
    ),
    Case(
        "most recently started goes first at equal priority",
        base()
        .with_running(bob_runs("old", 4, ago=120), bob_runs("new", 4, ago=10))
        .with_pending(a_job("a1", gpus=4).on_models("a100-80gb"))
        .build(),
        {"new"},
        ReasonCode.PREEMPTING,
    ),
    Case(
        "lowest priority goes first, however old",
        base()
        .with_running(
            bob_runs("important", 4, prio=10, ago=5), bob_runs("cheap", 4, prio=0, ago=300)
        )
        .with_pending(a_job("a1", gpus=4).on_models("a100-80gb"))
        .build(),
        {"cheap"},
        ReasonCode.PREEMPTING,
    ),
    Case(
        "the set is minimal: one 4-GPU victim rather than a 2 and a 4",
        base()
        .with_running(
            bob_runs("b2", 2, ago=10), bob_runs("b4", 4, ago=30), bob_runs("b1", 2, ago=60)
        )
        .with_pending(a_job("a1", gpus=4).on_models("a100-80gb"))
        .build(),
        {"b4"},
        ReasonCode.PREEMPTING,
    ),
    Case(
        "victims are chosen on the node the gang needs, not spread thin",
        base(nodes=2)
        .with_running(
            bob_runs("n0-a", 4, node=NODE0, ago=10),
            bob_runs("n1-a", 4, node=NODE1, ago=20),
            bob_runs("n0-b", 4, node=NODE0, ago=30),
            bob_runs("n1-b", 4, node=NODE1, ago=40),
        )
        .with_pending(a_job("a1", gpus=8).on_models("a100-80gb"))
        .build(),
        {"n0-a", "n0-b"},
        ReasonCode.PREEMPTING,
    ),
    Case(
        "never preempt a job running within its own team's nominal",
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 1, gpus=8))
        .with_quota("alice", "a100-80gb", 8)
        .with_quota("bob", "a100-80gb", 4)
        .with_running(bob_runs("b-nominal", 4))
        .with_pending(a_job("a1", gpus=8).on_models("a100-80gb"))
        .build(),
        set(),
        ReasonCode.NO_CAPACITY,
    ),
    Case(
        "no preemption when it would not make the job fit",
        base()
        .with_running(
            bob_runs("b1", 4),
            running("x", team="carol", cluster="east", model="a100-80gb", nodes=[NODE0], gpus=4),
        )
        .with_quota("carol", "a100-80gb", 4)
        .with_pending(a_job("a1", gpus=8).on_models("a100-80gb"))
        .build(),
        set(),
        ReasonCode.NO_CAPACITY,
    ),
    Case(
        "no preemption for a job that would itself borrow",
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 1, gpus=8))
        .with_quota("alice", "a100-80gb", 2)
        .with_quota("bob", "a100-80gb", 0)
        .with_cohort_quota("default", "a100-80gb", 8)
        .with_running(bob_runs("b1", 8))
        .with_pending(a_job("a1", gpus=4).on_models("a100-80gb"))
        .build(),
        set(),
        ReasonCode.COHORT_HAS_NOTHING_TO_LEND,
    ),
    Case(
        "a preemption already under way is waited for, not repeated",
        base()
        .with_running(bob_runs("going", 8, preempting=True), bob_runs("other", 0))
        .with_pending(a_job("a1", gpus=8).on_models("a100-80gb"))
        .build(),
        set(),
        ReasonCode.PREEMPTING,
    ),
    Case(
        "preemption can be switched off",
        base()
        .with_running(bob_runs("b1", 8))
        .with_pending(a_job("a1", gpus=8).on_models("a100-80gb"))
        .build(),
        set(),
        ReasonCode.NO_CAPACITY,
        EngineConfig(preemption=False),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_preemption(case: Case) -> None:
    decision = decide(case.snapshot, case.config)
    assert preempted(decision) == case.want_preempted
    assert not admitted(decision)
    reason = reasons_by_job(decision)["a1"]
    assert reason.code is case.want_code, reason.message
    for p in decision.preemptions:
        assert p.for_job == "a1" and p.code is PreemptionCode.RECLAIM_NOMINAL


def test_the_reclaimed_room_is_reserved_for_the_preemptor() -> None:
    """After preempting for alice, carol (later in line) may not take the free GPUs alice's
    plan counts on."""
    snap = (
        base()
        .with_quota("carol", "a100-80gb", 0)
        .with_cohort_quota("default", "a100-80gb", 4)
        .with_running(bob_runs("b1", 4))
        .with_pending(a_job("a1", gpus=8).on_models("a100-80gb"))
        .with_pending(a_job("c1", team="carol", gpus=4).on_models("a100-80gb").submitted(1))
        .build()
    )
    decision = decide(snap)
    assert preempted(decision) == {"b1"}
    assert "c1" not in admitted(decision)


def test_messages_say_who_reclaims_what() -> None:
    snap = (
        base()
        .with_running(bob_runs("b1", 8))
        .with_pending(a_job("a1", gpus=8).on_models("a100-80gb"))
        .build()
    )
    decision = decide(snap)
    (p,) = decision.preemptions
    assert p.message == (
        "preempted: team alice reclaims its nominal A100-80GB quota (8 of 8 with the job it "
        "reclaims for); this job's 8 A100-80GB GPUs in east ran on quota team bob had "
        "borrowed; its pods get SIGTERM and their grace period to checkpoint, then it is "
        "requeued with its submit time"
    )
    assert "a1" not in p.message  # another team's job is not named to the victim
    assert (p.for_job, p.for_team) == ("a1", "alice")
    msg = reasons_by_job(decision)["a1"].message
    assert msg.startswith("needs 8 \u00d7 A100-80GB; preempting 1 job on borrowed quota in east")
    assert "team uses 8 of 8 nominal" in msg


def test_jobs_on_cohort_owned_capacity_are_borrowed_and_reclaimable() -> None:
    """Bob has no quota row: his two jobs run on alice's idle nominal and on the cohort's own
    quota, both borrowed. Alice, within nominal, reclaims one (the newest), not both."""
    snap = (
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 1, gpus=8))
        .with_quota("alice", "a100-80gb", 4)
        .with_cohort_quota("default", "a100-80gb", 4)
        .with_running(bob_runs("b-old", 4, ago=120), bob_runs("b-new", 4, ago=10))
        .with_pending(a_job("a1", gpus=4).on_models("a100-80gb"))
        .build()
    )
    decision = decide(snap)
    assert preempted(decision) == {"b-new"}
    assert reasons_by_job(decision)["a1"].code is ReasonCode.PREEMPTING


def _host(snapshot: Snapshot, *, cpu: int, memory: int | None = None) -> Snapshot:
    """The snapshot with every node reporting ``cpu`` milli-CPU (and ``memory`` MiB) free."""
    clusters = tuple(
        replace(c, nodes=tuple(replace(n, cpu_free=cpu, memory_free=memory) for n in c.nodes))
        for c in snapshot.clusters
    )
    return replace(snapshot, clusters=clusters)


def _with_host(alloc: RunningAllocation, *, cpu: int, memory: int = 0) -> RunningAllocation:
    return replace(alloc, cpu_milli=cpu, memory_mib=memory)


@pytest.mark.parametrize(
    ("free_cpu", "victim_cpu", "want"),
    [
        # 2 CPUs free and the victim gives back 2: 4 < the 8 the claimer asks. Preempting
        # it would kill a job for room nobody could start in.
        (2_000, 2_000, set()),
        # The victim's 6 CPUs make the 8: it goes, as before.
        (2_000, 6_000, {"b1"}),
    ],
)
def test_a_reclaim_counts_the_cpu_its_victims_give_back(
    free_cpu: int, victim_cpu: int, want: set[str]
) -> None:
    snapshot = _host(
        base()
        .with_running(_with_host(bob_runs("b1", 8), cpu=victim_cpu))
        .with_pending(a_job("a1", gpus=8).on_models("a100-80gb"))
        .build(),
        cpu=free_cpu,
    )
    claimer = replace(snapshot.pending[0], cpu_milli=8_000)
    decision = decide(replace(snapshot, pending=(claimer,)))
    assert preempted(decision) == want
    reason = reasons_by_job(decision)["a1"]
    assert reason.code is (ReasonCode.PREEMPTING if want else ReasonCode.NO_CAPACITY)


def test_a_reclaim_counts_the_memory_its_victims_give_back() -> None:
    snapshot = _host(
        base()
        .with_running(_with_host(bob_runs("b1", 8), cpu=1_000, memory=1_024))
        .with_pending(a_job("a1", gpus=8).on_models("a100-80gb"))
        .build(),
        cpu=64_000,
        memory=2_048,
    )
    claimer = replace(snapshot.pending[0], cpu_milli=1_000, memory_mib=65_536)
    decision = decide(replace(snapshot, pending=(claimer,)))
    assert preempted(decision) == set()
