"""The placement rule's node CPU and memory, stranding and scarcity (issue 31).

A node whose CPUs (or memory) are taken strands its GPUs: nothing is planned there, for
whole GPUs as for shares. With an expected mix of work (``Snapshot.demand``) the rule also
sees stranding coming (CPU-heavy work to CPU-rich nodes, CPU-light work to CPU-poor ones)
and weighs room that only some shapes may use by how scarce it is for them.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from rules.engine import (
    Cluster,
    ClusterState,
    Demand,
    GpuModel,
    Node,
    PendingJob,
    Quota,
    Requirement,
    Snapshot,
    Team,
    decide,
)
from rules.engine.capacity import Pool, pool_of
from rules.engine.placement import Fragmentation

NOW = datetime(2025, 3, 3, 12, 0, tzinfo=UTC)
A100 = GpuModel(key="a100", name="A100", memory_gib=80)


def gpu_node(name: str, free: int, *, total: int = 8, cpu: int | None = None, mem=None) -> Node:
    return Node(
        name=name, model=A100.key, total_gpus=total, free_gpus=free, cpu_free=cpu, memory_free=mem
    )


def job(job_id: str, gpus: int, *, replicas: int = 1, cpu: int = 0, mem: int = 0, minutes=10):
    return PendingJob(
        id=job_id,
        team="alice",
        submitted_at=NOW - timedelta(minutes=minutes),
        gpus_per_replica=gpus,
        replicas=replicas,
        cpu_milli=cpu,
        memory_mib=mem,
    )


def snapshot(*nodes: Node, jobs: tuple[PendingJob, ...], demand: tuple[Demand, ...] = ()):
    return Snapshot(
        now=NOW,
        models=(A100,),
        teams=(Team(id="alice"),),
        quotas=(Quota(team="alice", model=A100.key, nominal=1000),),
        clusters=(Cluster(id="east", nodes=nodes),),
        pending=jobs,
        demand=demand,
    )


def test_a_whole_gpu_job_is_not_planned_where_the_cpus_are_taken():
    # Best fit alone would take n0 (2 GPUs free): its CPUs are gone, so n1 takes the job.
    decision = decide(
        snapshot(
            gpu_node("n0", 2, cpu=1_000),
            gpu_node("n1", 8, cpu=64_000),
            jobs=(job("j", 2, cpu=4_000),),
        )
    )
    assert decision.admissions[0].node_plan == ("n1",)


def test_a_whole_gpu_job_is_not_planned_where_the_memory_is_taken():
    decision = decide(
        snapshot(
            gpu_node("n0", 2, cpu=64_000, mem=1_024),
            gpu_node("n1", 8, cpu=64_000, mem=512_000),
            jobs=(job("j", 2, cpu=4_000, mem=65_536),),
        )
    )
    assert decision.admissions[0].node_plan == ("n1",)


def test_a_gang_puts_no_more_replicas_on_a_node_than_its_cpus_feed():
    # n0 has the GPUs for two replicas but the CPU for one.
    decision = decide(
        snapshot(
            gpu_node("n0", 8, cpu=6_000),
            gpu_node("n1", 8, cpu=64_000),
            jobs=(job("g", 4, replicas=2, cpu=4_000),),
        )
    )
    (admission,) = decision.admissions
    assert admission.node_plan.count("n0") <= 1
    assert len(admission.node_plan) == 2


def test_a_job_that_fits_only_where_the_cpus_are_taken_waits_and_says_why():
    decision = decide(snapshot(gpu_node("n0", 8, cpu=1_000), jobs=(job("j", 2, cpu=4_000),)))
    assert decision.admissions == ()
    (reason,) = decision.pending
    assert "the nodes with 2 free lack the CPU or memory it asks" in reason.message


# The expected mix: mostly 1-GPU jobs with 8 CPUs, some CPU-only pods.
MIX = (
    Demand(gpus_per_replica=1, cpu_milli=8_000, weight=4),
    Demand(gpus_per_replica=0, cpu_milli=8_000),
)


@pytest.mark.parametrize(
    ("cpu", "node"),
    [(24_000, "rich"), (1_000, "poor")],
    ids=[
        "a CPU-heavy job goes where the CPUs are plenty, stranding no GPU",
        "a CPU-light job goes where the CPUs are scarce, using GPUs they could not feed",
    ],
)
def test_with_a_demand_the_rule_sees_stranding_coming(cpu, node):
    # Both nodes have 8 GPUs free: 'poor' has 32 CPUs (4 per GPU, less than the mix asks),
    # 'rich' 256. Best fit alone cannot tell them apart by GPUs.
    decision = decide(
        snapshot(
            gpu_node("poor", 8, cpu=32_000),
            gpu_node("rich", 8, cpu=256_000),
            jobs=(job("j", 1, cpu=cpu),),
            demand=MIX,
        )
    )
    assert decision.admissions[0].node_plan == (node,)


def test_room_only_some_shapes_may_use_weighs_by_how_scarce_it_is_for_them():
    # Two 2-GPU shapes, equally frequent: one may use any model, the other only 'p100',
    # a tenth of the pool. One free GPU on a p100 node is fragment for both; the
    # constrained shape's part weighs ten times (the pool over its models).
    mix = [Demand(gpus_per_replica=2), Demand(gpus_per_replica=2, models=("p100",))]
    plain = Fragmentation(mix)
    scarce = Fragmentation(mix, {"p100": 4, "g2": 36})
    # Two free GPUs on a g2 node (a whole-GPU node's books: one count): the unconstrained
    # shape can use them, the p100 one never.
    assert plain.of("g2", 10_000, (2,)) == pytest.approx(2 * 0.5)
    assert scarce.of("g2", 10_000, (2,)) == pytest.approx(2 * 0.5 * 10)
    # On a p100 node both can: no fragment either way.
    assert scarce.of("p100", 10_000, (2,)) == 0
    # So work that may go anywhere grows the fragmentation less on g2 (it uses room the
    # scarce shape could not) than on p100 (it takes room only the scarce shape has).
    assert scarce.grow("g2", 10_000, (2,), 10_000, (1,)) < scarce.grow(
        "p100", 10_000, (2,), 10_000, (1,)
    )


def test_a_pool_patched_from_the_last_one_equals_a_pool_built_afresh():
    shared = GpuModel(key="s", memory_gib=1000, shared_of="a100")
    nodes = [
        Node(
            name=f"n{i}",
            model=shared.key,
            total_gpus=2000,
            free_gpus=2000,
            devices=(1000, 1000),
            cpu_free=32_000,
            memory_free=100_000,
        )
        for i in range(5)
    ]
    first = pool_of("east", ClusterState.ENABLED, "s", nodes, shared=True, device_size=1000)
    first.take_ask(1, (300, 1, 0, 1_000, 10), (0,))  # the first decision's own changes
    nodes[3] = replace(nodes[3], free_gpus=1400, devices=(400, 1000), cpu_free=20_000)
    patched = pool_of("east", ClusterState.ENABLED, "s", nodes, shared=True, device_size=1000)
    fresh = Pool("east", ClusterState.ENABLED, "s", nodes, shared=True, device_size=1000)
    for name in ("names", "total", "free", "dev", "cpu", "mem", "free_total", "general"):
        assert getattr(patched, name) == getattr(fresh, name), name
    # A node that changes more than its free room (here its size) builds the pool afresh.
    nodes[0] = replace(nodes[0], total_gpus=1000, free_gpus=1000, devices=(1000,))
    rebuilt = pool_of("east", ClusterState.ENABLED, "s", nodes, shared=True, device_size=1000)
    assert (
        rebuilt.total
        == Pool("east", ClusterState.ENABLED, "s", nodes, shared=True, device_size=1000).total
    )


def test_a_share_job_and_the_requirement_still_match_only_shared_pools():
    # The CPU books do not open a whole-GPU pool to shares (the no-mixing rule holds).
    share = replace(job("s", 10, cpu=1_000), requirement=Requirement(shared=True))
    decision = decide(snapshot(gpu_node("n0", 8, cpu=64_000), jobs=(share,)))
    assert decision.admissions == ()


def test_an_empty_node_is_kept_whole_while_the_mix_asks_for_whole_nodes():
    # One job in twenty asks a whole 8-GPU node (64 CPUs), the rest 1 GPU and 16 CPUs:
    # 13.6 CPUs per GPU. 'fresh' is empty with 80 CPUs (10 per GPU): the CPU part alone
    # says a CPU-light job relieves its stranding there. 'used' has 4 GPUs and 60 CPUs
    # left, where no 8-GPU job fits any more. Counted by jobs, the 8-GPU shape is a
    # twentieth of the mix and the relief wins; counted by the GPUs they ask, it is 30 % of
    # the work, and the node it could take is kept whole.
    mix = (
        Demand(gpus_per_replica=8, cpu_milli=64_000, weight=1),
        Demand(gpus_per_replica=1, cpu_milli=16_000, weight=19),
    )
    decision = decide(
        snapshot(
            gpu_node("fresh", 8, cpu=80_000),
            gpu_node("used", 4, cpu=60_000),
            jobs=(job("j", 1, cpu=2_000),),
            demand=mix,
        )
    )
    assert decision.admissions[0].node_plan == ("used",)


def test_shapes_count_by_the_gpu_units_they_ask():
    # Equally frequent 1-GPU and 4-GPU shapes: the 4-GPU one asks four fifths of the GPUs.
    # Three free GPUs on a 4-GPU node: the 1-GPU shape can use them, the 4-GPU one not.
    frag = Fragmentation([Demand(gpus_per_replica=1), Demand(gpus_per_replica=4)])
    assert frag.of("a100", 10_000, (3,)) == pytest.approx(3 * 0.8)
