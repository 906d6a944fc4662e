"""The worked example of docs/scheduling.md, number for number."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rules.engine import (
    Cluster,
    GpuModel,
    Node,
    PendingJob,
    Quota,
    ReasonCode,
    Requirement,
    RunningAllocation,
    Snapshot,
    Team,
    Usage,
    decide,
)
from tests.scheduling.engine.builders import NOW

A100 = GpuModel(
    key="a100-80gb", name="A100-80GB", cost_factor=4.0, tflops_fp16=312, memory_gib=80, bf16=True
)
T4 = GpuModel(key="t4", name="T4", cost_factor=1.0, tflops_fp16=65, memory_gib=16)


def docs_example() -> Snapshot:
    return Snapshot(
        now=NOW,
        models=(T4, A100),
        teams=(Team(id="vision", weight=1), Team(id="language", weight=2)),
        quotas=(
            Quota(team="vision", model="a100-80gb", nominal=4),
            Quota(team="language", model="a100-80gb", nominal=12),
            Quota(team="vision", model="t4", nominal=4),
            Quota(team="language", model="t4", nominal=4),
        ),
        clusters=(
            Cluster(
                id="east",
                nodes=(
                    Node(name="east-a0", model="a100-80gb", total_gpus=8, free_gpus=0),
                    Node(name="east-a1", model="a100-80gb", total_gpus=8, free_gpus=8),
                    Node(name="east-t0", model="t4", total_gpus=4, free_gpus=4),
                    Node(name="east-t1", model="t4", total_gpus=4, free_gpus=4),
                ),
            ),
        ),
        running=(
            RunningAllocation(
                job_id="v-train",
                team="vision",
                cluster="east",
                model="a100-80gb",
                replicas=1,
                gpus_per_replica=8,
                started_at=NOW - timedelta(hours=3),
                nodes=("east-a0",),
            ),
        ),
        usage=(
            Usage(team="vision", model="a100-80gb", weighted_gpu_hours=2000.0),
            Usage(team="language", model="a100-80gb", weighted_gpu_hours=1000.0),
        ),
        pending=(
            *(
                PendingJob(
                    id=f"lang-{i}",
                    team="language",
                    submitted_at=NOW - timedelta(minutes=30 - i),
                    gpus_per_replica=2,
                    requirement=Requirement(models=("a100-80gb",)),
                )
                for i in range(5)
            ),
            PendingJob(
                id="vis-infer",
                team="vision",
                submitted_at=NOW - timedelta(minutes=40),
                gpus_per_replica=1,
                requirement=Requirement(min_memory_gib=12),
            ),
            PendingJob(
                id="vis-big",
                team="vision",
                submitted_at=NOW - timedelta(minutes=50),
                gpus_per_replica=8,
                requirement=Requirement(models=("a100-80gb",)),
            ),
        ),
    )


def test_the_worked_example_of_the_docs() -> None:
    d = decide(docs_example())
    shares = {s.team: s for s in d.shares}
    assert shares["vision"].usage_share == pytest.approx(2000 / 17450.8, abs=1e-5)
    assert shares["vision"].share_before == pytest.approx(0.6146, abs=1e-4)
    assert shares["language"].share_before == pytest.approx(0.0287, abs=1e-4)
    assert shares["language"].share_after == pytest.approx(0.3412, abs=1e-4)
    assert shares["language"].allocation_share == pytest.approx(0.625)
    assert shares["vision"].share_after == pytest.approx(0.6146, abs=1e-4)
    assert [(a.job_id, a.model, a.node_plan) for a in d.admissions] == [
        ("lang-0", "a100-80gb", ("east-a1",)),
        ("lang-1", "a100-80gb", ("east-a1",)),
        ("lang-2", "a100-80gb", ("east-a1",)),
        ("lang-3", "a100-80gb", ("east-a1",)),
        ("vis-infer", "t4", ("east-t0",)),
    ]
    assert [(p.job_id, p.for_job) for p in d.preemptions] == [("v-train", "lang-4")]
    assert [(p.position, p.job_id, p.code) for p in d.pending] == [
        (1, "lang-4", ReasonCode.PREEMPTING),
        (2, "vis-big", ReasonCode.COHORT_HAS_NOTHING_TO_LEND),
    ]
    assert d.admissions[0].explanation.message == (
        "admitted 2 \u00d7 A100-80GB in east (first cheapest candidate; best fit leaves 6 free "
        "on the nodes used; within nominal (2 of 12))"
    )
    assert d.pending[1].message == (
        "needs 8 \u00d7 A100-80GB; cohort has nothing to lend: this job would borrow 8 (the "
        "team uses 8 of 4 nominal, borrowing limit none)"
    )
