"""Quota and capacity fit: guarantees, borrowing, gangs, best fit, model choice, hold, drain.

Each case is a scenario with a narrative id and what we want to see: which jobs are admitted
where (``want``) and, for jobs left pending, their reason code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rules.engine import Policy, ReasonCode, decide
from rules.engine.snapshot import Snapshot
from tests.scheduling.engine.builders import (
    ClusterBuilder,
    a_cluster,
    a_job,
    a_snapshot,
    admitted,
    reasons_by_job,
    running,
)


@dataclass
class Case:
    id: str
    snapshot: Snapshot
    want: dict[str, tuple[str, str]] = field(default_factory=dict)
    """job -> (cluster, model) admitted."""
    want_pending: dict[str, ReasonCode] = field(default_factory=dict)
    want_borrowed: dict[str, int] = field(default_factory=dict)


def a100s(n: int = 1, gpus: int = 8, cluster: str = "east") -> ClusterBuilder:
    return a_cluster(cluster).with_nodes("a100-80gb", n, gpus=gpus)


CASES = [
    Case(
        "guaranteed quota honoured under contention: the lender's own jobs go before borrowers",
        a_snapshot()
        .with_clusters(a100s(1))
        .with_quota("alice", "a100-80gb", 4)
        .with_quota("bob", "a100-80gb", 4)
        # bob has used a lot less, so his share is lower and he is visited first...
        .with_usage("alice", "a100-80gb", 500)
        .with_pending(
            *(a_job(f"b{i}", team="bob", gpus=2).on_models("a100-80gb") for i in range(4))
        )
        .with_pending(a_job("a1", team="alice", gpus=4).on_models("a100-80gb"))
        .build(),
        # ...but only on nominal first: bob gets his 4, alice her 4, bob's borrowing waits.
        want={
            "b0": ("east", "a100-80gb"),
            "b1": ("east", "a100-80gb"),
            "a1": ("east", "a100-80gb"),
        },
        want_pending={
            "b2": ReasonCode.COHORT_HAS_NOTHING_TO_LEND,
            "b3": ReasonCode.COHORT_HAS_NOTHING_TO_LEND,
        },
    ),
    Case(
        "idle nominal quota of the cohort is lent out",
        a_snapshot()
        .with_clusters(a100s(1))
        .with_quota("alice", "a100-80gb", 4)
        .with_quota("bob", "a100-80gb", 4)
        .with_pending(a_job("a1", team="alice", gpus=8).on_models("a100-80gb"))
        .build(),
        want={"a1": ("east", "a100-80gb")},
        want_borrowed={"a1": 4},
    ),
    Case(
        "the borrowing limit caps what is borrowed",
        a_snapshot()
        .with_clusters(a100s(1))
        .with_quota("alice", "a100-80gb", 4, borrowing=2)
        .with_quota("bob", "a100-80gb", 4)
        .with_pending(a_job("a1", team="alice", gpus=8).on_models("a100-80gb"))
        .with_pending(a_job("a2", team="alice", gpus=6).on_models("a100-80gb").submitted(5))
        .build(),
        want={"a2": ("east", "a100-80gb")},
        want_pending={"a1": ReasonCode.QUOTA_EXHAUSTED},
        want_borrowed={"a2": 2},
    ),
    Case(
        "a lending limit keeps part of the idle nominal home",
        a_snapshot()
        .with_clusters(a100s(1))
        .with_quota("alice", "a100-80gb", 4)
        .with_quota("bob", "a100-80gb", 4, lending=1)
        .with_pending(a_job("a1", team="alice", gpus=6).on_models("a100-80gb"))
        .with_pending(a_job("a2", team="alice", gpus=5).on_models("a100-80gb").submitted(5))
        .build(),
        want={"a2": ("east", "a100-80gb")},
        want_pending={"a1": ReasonCode.COHORT_HAS_NOTHING_TO_LEND},
    ),
    Case(
        "teams of another cohort lend nothing",
        a_snapshot()
        .with_clusters(a100s(1))
        .with_team("alice", cohort="vision")
        .with_team("bob", cohort="language")
        .with_quota("alice", "a100-80gb", 4)
        .with_quota("bob", "a100-80gb", 4)
        .with_pending(a_job("a1", team="alice", gpus=6).on_models("a100-80gb"))
        .build(),
        want_pending={"a1": ReasonCode.COHORT_HAS_NOTHING_TO_LEND},
    ),
    Case(
        "cohort-owned quota is borrowable by every member",
        a_snapshot()
        .with_clusters(a100s(1))
        .with_team("alice")
        .with_cohort_quota("default", "a100-80gb", 8)
        .with_pending(a_job("a1", team="alice", gpus=8).on_models("a100-80gb"))
        .build(),
        want={"a1": ("east", "a100-80gb")},
        want_borrowed={"a1": 8},
    ),
    Case(
        "gang is all or nothing: 3 replicas of 8 do not start on 2 free nodes",
        a_snapshot()
        .with_clusters(a100s(2))
        .with_quota("alice", "a100-80gb", 32)
        .with_pending(a_job("g", gpus=8, replicas=3).on_models("a100-80gb"))
        .build(),
        want_pending={"g": ReasonCode.JOB_TOO_LARGE},
    ),
    Case(
        "gang waits when the nodes exist but are busy",
        a_snapshot()
        .with_clusters(a100s(3))
        .with_quota("alice", "a100-80gb", 32)
        .with_running(
            running(
                "r",
                team="alice",
                cluster="east",
                model="a100-80gb",
                nodes=["east-a100-80gb-0"],
                gpus=1,
            )
        )
        .with_pending(a_job("g", gpus=8, replicas=3).on_models("a100-80gb"))
        .build(),
        want_pending={"g": ReasonCode.NO_CAPACITY},
    ),
    Case(
        "gang of 2 x 4 may share one 8-GPU node",
        a_snapshot()
        .with_clusters(a100s(1))
        .with_quota("alice", "a100-80gb", 8)
        .with_pending(a_job("g", gpus=4, replicas=2).on_models("a100-80gb"))
        .build(),
        want={"g": ("east", "a100-80gb")},
    ),
    Case(
        "best fit across clusters: a 2-GPU job goes where it leaves least, big block stays whole",
        a_snapshot()
        .with_clusters(a100s(1, cluster="big"), a100s(1, cluster="frag"))
        .with_quota("alice", "a100-80gb", 16)
        .with_running(
            running(
                "r",
                team="alice",
                cluster="frag",
                model="a100-80gb",
                nodes=["frag-a100-80gb-0"],
                gpus=6,
            )
        )
        .with_pending(a_job("small", gpus=2).on_models("a100-80gb"))
        .with_pending(a_job("large", gpus=8).on_models("a100-80gb").submitted(1))
        .build(),
        want={"small": ("frag", "a100-80gb"), "large": ("big", "a100-80gb")},
    ),
    Case(
        "cheapest adequate: a 12 GiB inference job lands on T4 before A100",
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 1).with_nodes("t4", 1, gpus=4))
        .with_quota("alice", "a100-80gb", 8)
        .with_quota("alice", "t4", 4)
        .with_pending(a_job("infer").needs(memory_gib=12).policy(Policy.CHEAPEST))
        .build(),
        want={"infer": ("east", "t4")},
    ),
    Case(
        "cheapest falls through to L4 when T4 is full and fallback is allowed",
        a_snapshot()
        .with_clusters(
            a_cluster()
            .with_nodes("a100-80gb", 1)
            .with_nodes("t4", 1, gpus=4)
            .with_nodes("l4", 1, gpus=4)
        )
        .with_quota("alice", "a100-80gb", 8)
        .with_quota("alice", "t4", 4)
        .with_quota("alice", "l4", 4)
        .with_running(
            running("r", team="alice", cluster="east", model="t4", nodes=["east-t4-0"], gpus=4)
        )
        .with_pending(a_job("infer").needs(memory_gib=12))
        .build(),
        want={"infer": ("east", "l4")},
    ),
    Case(
        "without fallback a job waits for its first choice",
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("t4", 1, gpus=4).with_nodes("l4", 1, gpus=4))
        .with_quota("alice", "t4", 8)
        .with_quota("alice", "l4", 4)
        .with_running(
            running("r", team="alice", cluster="east", model="t4", nodes=["east-t4-0"], gpus=4)
        )
        .with_pending(a_job("infer").needs(memory_gib=12).no_fallback())
        .build(),
        want_pending={"infer": ReasonCode.NO_CAPACITY},
    ),
    Case(
        "fastest picks H100 over A100 when both have room",
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 1).with_nodes("h100-80gb", 1))
        .with_quota("alice", "a100-80gb", 8)
        .with_quota("alice", "h100-80gb", 8)
        .with_pending(a_job("train", gpus=8).needs(bf16=True).policy(Policy.FASTEST))
        .build(),
        want={"train": ("east", "h100-80gb")},
    ),
    Case(
        "ordered honours the user's list even when a cheaper model has room",
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 1).with_nodes("t4", 1, gpus=4))
        .with_quota("alice", "a100-80gb", 8)
        .with_quota("alice", "t4", 4)
        .with_pending(a_job("j", gpus=2).on_models("a100-80gb", "t4"))
        .build(),
        want={"j": ("east", "a100-80gb")},
    ),
    Case(
        "a draining cluster gets nothing new; the job goes to the enabled one",
        a_snapshot()
        .with_clusters(a100s(1, cluster="old").draining(), a100s(1, cluster="new"))
        .with_quota("alice", "a100-80gb", 16)
        .with_pending(a_job("j", gpus=8).on_models("a100-80gb"))
        .with_pending(a_job("k", gpus=8).on_models("a100-80gb").submitted(1))
        .build(),
        want={"j": ("new", "a100-80gb")},
        want_pending={"k": ReasonCode.WAITING_BEHIND},
    ),
    Case(
        "only draining clusters have the model",
        a_snapshot()
        .with_clusters(a100s(1, cluster="old").draining())
        .with_quota("alice", "a100-80gb", 8)
        .with_pending(a_job("j", gpus=1).on_models("a100-80gb"))
        .build(),
        want_pending={"j": ReasonCode.CLUSTER_DRAINING},
    ),
    Case(
        "disabled clusters take nothing and say so",
        a_snapshot()
        .with_clusters(a100s(1, cluster="old").disabled())
        .with_quota("alice", "a100-80gb", 8)
        .with_pending(a_job("j", gpus=1).on_models("a100-80gb"))
        .build(),
        want_pending={"j": ReasonCode.NO_ENABLED_CLUSTER},
    ),
    Case(
        "a held team's queue admits nothing while others proceed",
        a_snapshot()
        .with_clusters(a100s(1))
        .with_team("alice", held=True)
        .with_quota("alice", "a100-80gb", 4)
        .with_quota("bob", "a100-80gb", 4)
        .with_pending(a_job("a1", gpus=1).on_models("a100-80gb"))
        .with_pending(a_job("b1", team="bob", gpus=1).on_models("a100-80gb"))
        .build(),
        want={"b1": ("east", "a100-80gb")},
        want_pending={"a1": ReasonCode.TEAM_HELD},
    ),
    Case(
        "a requirement matching no model says so",
        a_snapshot().with_clusters(a100s(1)).with_pending(a_job("j").needs(memory_gib=500)).build(),
        want_pending={"j": ReasonCode.NO_MODEL_MATCHES},
    ),
    Case(
        "a job of zero GPUs is invalid",
        a_snapshot().with_clusters(a100s(1)).with_pending(a_job("j", gpus=0)).build(),
        want_pending={"j": ReasonCode.INVALID_JOB},
    ),
    Case(
        "a job bigger than any node is too large",
        a_snapshot()
        .with_clusters(a100s(2))
        .with_quota("alice", "a100-80gb", 16)
        .with_pending(a_job("j", gpus=16).on_models("a100-80gb"))
        .build(),
        want_pending={"j": ReasonCode.JOB_TOO_LARGE},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fit(case: Case) -> None:
    decision = decide(case.snapshot)
    got = {j: (a.cluster, a.model) for j, a in admitted(decision).items()}
    assert got == case.want
    pending = {j: r.code for j, r in reasons_by_job(decision).items()}
    for job, code in case.want_pending.items():
        assert pending[job] is code, reasons_by_job(decision)[job].message
    for job, borrowed in case.want_borrowed.items():
        assert admitted(decision)[job].borrowed_gpus == borrowed
    # Every considered job is either admitted or has exactly one reason.
    assert set(got) | set(pending) == {j.id for j in case.snapshot.pending}
    assert not set(got) & set(pending)
