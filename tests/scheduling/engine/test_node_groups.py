"""Node groups: nodes of one model in one cluster that a job may not mix (the cycle groups by
GPU resource name: MIG single- and mixed-strategy nodes). Each group is a pool of its own."""

from __future__ import annotations

from dataclasses import replace

from rules.engine import ReasonCode, decide
from rules.engine.snapshot import Snapshot
from tests.scheduling.engine.builders import (
    a_cluster,
    a_job,
    a_snapshot,
    admitted,
    reasons_by_job,
    running,
)


def _grouped(snapshot: Snapshot) -> Snapshot:
    """Node 0 of each model under one resource name, the others under another."""
    clusters = tuple(
        replace(
            c,
            nodes=tuple(
                replace(n, group="nvidia.com/gpu" if n.name.endswith("-0") else "nvidia.com/mig")
                for n in c.nodes
            ),
        )
        for c in snapshot.clusters
    )
    return replace(snapshot, clusters=clusters)


def _pool(*jobs, running_jobs=()) -> Snapshot:
    builder = (
        a_snapshot()
        .with_clusters(a_cluster().with_nodes("a100-80gb", 2, gpus=4))
        .with_quota("alice", "a100-80gb", 16)
        .with_quota("bob", "a100-80gb", 0, borrowing=16)
    )
    for r in running_jobs:
        builder = builder.with_running(r)
    for j in jobs:
        builder = builder.with_pending(j)
    return _grouped(builder.build())


def test_a_gang_is_never_spread_over_two_groups():
    reason = reasons_by_job(decide(_pool(a_job("gang", gpus=4, replicas=2).on_models("a100-80gb"))))
    assert reason["gang"].code is ReasonCode.JOB_TOO_LARGE
    assert "a gang cannot mix resource names" in reason["gang"].message


def test_a_gang_that_fits_one_group_lands_in_it_whole():
    decision = decide(_pool(a_job("pair", gpus=2, replicas=2).on_models("a100-80gb")))
    (plan,) = {a.node_plan for a in admitted(decision).values()}
    assert len(set(plan)) == 1  # both replicas on one node: one group


def test_a_borrower_in_either_group_is_reclaimed_from_its_own_pool():
    # Bob borrows the node of the second group; Alice, within nominal, needs 4 there or anywhere.
    borrower = running("b", team="bob", cluster="east", model="a100-80gb",
                       nodes=["east-a100-80gb-1"], gpus=4)  # fmt: skip
    filler = running("f", team="alice", cluster="east", model="a100-80gb",
                     nodes=["east-a100-80gb-0"], gpus=4)  # fmt: skip
    decision = decide(
        _pool(a_job("claim", gpus=4).on_models("a100-80gb"), running_jobs=(borrower, filler))
    )
    assert [p.job_id for p in decision.preemptions] == ["b"]
