"""A node that offers several MIG profiles is one row per profile, each reporting the node's
whole CPU and memory: a job planned on one row takes them off the others too."""

from __future__ import annotations

from dataclasses import replace

from rules.engine import Decision, GpuModel, decide
from rules.engine.snapshot import Snapshot
from tests.scheduling.engine.builders import (
    CATALOG,
    a_cluster,
    a_job,
    a_snapshot,
    admitted,
    reasons_by_job,
)

SMALL, LARGE = "a100-80gb-mig-1g.10gb", "a100-80gb-mig-3g.40gb"
SLICES = tuple(
    GpuModel(key=key, name=key, memory_gib=gib, tflops_fp16=tf, slice_of="a100-80gb")
    for key, gib, tf in ((SMALL, 10, 44), (LARGE, 40, 133))
)


def one_node_two_profiles(*, cpu: int, memory: int | None = None) -> Snapshot:
    """One physical node, "east-node", offering 4 small and 2 large slices."""
    snapshot = (
        a_snapshot()
        .with_models(*CATALOG, *SLICES)
        .with_clusters(a_cluster().with_nodes(SMALL, 1, gpus=4).with_nodes(LARGE, 1, gpus=2))
        .with_quota("alice", SMALL, 4)
        .with_quota("alice", LARGE, 2)
        .build()
    )
    clusters = tuple(
        replace(
            c,
            nodes=tuple(
                replace(n, name="east-node", cpu_free=cpu, memory_free=memory) for n in c.nodes
            ),
        )
        for c in snapshot.clusters
    )
    return replace(snapshot, clusters=clusters)


def two_jobs(snapshot: Snapshot, *, cpu: int, memory: int = 0) -> Snapshot:
    jobs = (
        replace(a_job("small", gpus=1).on_models(SMALL).build(), cpu_milli=cpu, memory_mib=memory),
        replace(a_job("large", gpus=1).on_models(LARGE).build(), cpu_milli=cpu, memory_mib=memory),
    )
    return replace(snapshot, pending=jobs)


def assert_one_admitted_and_the_other_told_why(decision: Decision) -> None:
    (first,) = admitted(decision)
    (second,) = {"small", "large"} - {first}
    assert reasons_by_job(decision)[second].message.endswith(
        "1 admitted this cycle took the room it would have fitted"
    )


def test_two_profiles_of_one_node_share_its_cpu() -> None:
    # 8 CPUs on the node, 6 asked by each: one fits, the second would be planned on a node
    # whose CPU is gone (the cluster would keep its pod Pending).
    decision = decide(two_jobs(one_node_two_profiles(cpu=8_000), cpu=6_000))
    assert_one_admitted_and_the_other_told_why(decision)


def test_two_profiles_of_one_node_share_its_memory() -> None:
    decision = decide(
        two_jobs(one_node_two_profiles(cpu=64_000, memory=16_384), cpu=1_000, memory=10_240)
    )
    assert_one_admitted_and_the_other_told_why(decision)


def test_both_fit_when_the_node_has_the_cpu_for_both() -> None:
    decision = decide(two_jobs(one_node_two_profiles(cpu=12_000), cpu=6_000))
    assert set(admitted(decision)) == {"small", "large"}
