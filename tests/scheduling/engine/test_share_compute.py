"""A share that caps compute is booked on its device's compute too, and says so when compute,
not memory, is what no device has left (issue 31)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rules.engine import (
    Cluster,
    GpuModel,
    Node,
    PendingJob,
    Quota,
    ReasonCode,
    Requirement,
    Snapshot,
    Team,
    decide,
)

NOW = datetime(2025, 3, 3, 12, 0, tzinfo=UTC)
SHARED = GpuModel(key="t4-shared", name="T4 shared", memory_gib=16, shared_of="t4")


def node(cores: tuple[int, ...]) -> Node:
    return Node(
        name="n0",
        model=SHARED.key,
        total_gpus=16 * len(cores),
        free_gpus=16 * len(cores),
        devices=(16,) * len(cores),
        device_ids=tuple(f"GPU-{i}" for i in range(len(cores))),
        device_cores=cores,
    )


def share(job_id: str, gib: int, cores: int) -> PendingJob:
    return PendingJob(
        id=job_id,
        team="alice",
        submitted_at=NOW - timedelta(minutes=10),
        gpus_per_replica=gib,
        requirement=Requirement(shared=True),
        cores_percent=cores,
    )


def snapshot(n: Node, *jobs: PendingJob) -> Snapshot:
    return Snapshot(
        now=NOW,
        models=(SHARED,),
        teams=(Team(id="alice"),),
        quotas=(Quota(team="alice", model=SHARED.key, nominal=1000),),
        clusters=(Cluster(id="east", nodes=(n,)),),
        pending=jobs,
    )


def test_a_share_goes_to_the_device_with_the_compute_it_caps():
    decision = decide(snapshot(node((30, 80)), share("s", 4, 60)))
    assert decision.admissions[0].device_plan == ("GPU-1",)


def test_memory_free_everywhere_but_no_compute_left_waits_saying_compute():
    decision = decide(snapshot(node((30, 20)), share("s", 4, 60)))
    (reason,) = decision.pending
    assert reason.code is ReasonCode.NO_CAPACITY
    assert "no single device has 4 GiB and 60 % of its compute free" in reason.message
