"""Shared (fractional) GPUs in the engine: a capacity kind of its own, counted in GiB.

A shared pool (Volcano vGPU / HAMi) of a card is a catalog model with ``shared_of`` set; a job
asking for a share has ``Requirement(shared=True)`` and ``gpus_per_replica`` = GiB per replica.
Whole GPUs, MIG slices and shares never take each other's jobs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from rules.engine import Policy, SkipCode, decide, resolve_candidates
from rules.engine.sharing import charged_gib, gpu_equivalents, shared_cost_factor
from rules.engine.snapshot import GpuModel, Requirement
from tests.scheduling.engine.builders import (
    A100,
    T4,
    a_cluster,
    a_job,
    a_snapshot,
    admitted,
    reasons_by_job,
)

A100_SHARED = GpuModel(
    key="a100-80gb-shared",
    name="A100-80GB shared",
    cost_factor=shared_cost_factor(A100.cost_factor, 80),
    tflops_fp16=312,
    memory_gib=80,
    shared_of="a100-80gb",
)
T4_SHARED = GpuModel(
    key="t4-shared",
    name="T4 shared",
    cost_factor=shared_cost_factor(T4.cost_factor, 16),
    tflops_fp16=65,
    memory_gib=16,
    shared_of="t4",
)
A100_MIG = GpuModel(
    key="a100-80gb-mig-1g.10gb", memory_gib=10, cost_factor=0.5, slice_of="a100-80gb"
)
CATALOG = (T4, A100, A100_SHARED, T4_SHARED, A100_MIG)


def a_share(job_id: str, gib: int, *, replicas: int = 1, team: str = "alice"):
    builder = a_job(job_id, team=team, gpus=gib, replicas=replicas)
    builder.job = replace(builder.job, requirement=Requirement(shared=True))
    return builder


@pytest.mark.parametrize(
    ("requirement", "matched"),
    [
        (Requirement(), ["t4", "a100-80gb"]),
        (Requirement(shared=True), ["a100-80gb-shared", "t4-shared"]),
        (Requirement(shared=True, models=("a100-80gb-shared",)), ["a100-80gb-shared"]),
        (Requirement(models=("a100-80gb-shared", "a100-80gb")), ["a100-80gb"]),
        (Requirement(shared=True, models=("a100-80gb", "t4-shared")), ["t4-shared"]),
        (Requirement(shared=True, min_memory_gib=40), ["a100-80gb-shared"]),
    ],
    ids=[
        "whole-GPU job never sees a shared pool or a slice",
        "a share sees every shared pool, cheapest per GiB first",
        "a share may name its pool",
        "a named shared pool is refused to a whole-GPU job",
        "a named whole card is refused to a share",
        "constraints still apply to shared pools",
    ],
)
def test_capacity_kinds_never_mix_in_candidates(requirement, matched):
    result = resolve_candidates(requirement, Policy.CHEAPEST, CATALOG)
    assert [m.key for m in result.matched] == matched


def test_a_named_model_of_the_wrong_kind_says_why():
    whole = resolve_candidates(Requirement(models=("a100-80gb-shared",)), Policy.ORDERED, CATALOG)
    share = resolve_candidates(
        Requirement(shared=True, models=("a100-80gb",)), Policy.ORDERED, CATALOG
    )
    assert [(n.model, n.code) for n in whole.rejected] == [
        ("a100-80gb-shared", SkipCode.KIND_MISMATCH)
    ]
    assert "shared GPU pool" in whole.rejected[0].message
    assert [(n.model, n.code) for n in share.rejected] == [("a100-80gb", SkipCode.KIND_MISMATCH)]
    assert "asks for a share" in share.rejected[0].message


def test_kinds_report_themselves():
    assert (A100.kind, A100_MIG.kind, A100_SHARED.kind) == ("whole", "mig", "shared")


def _quotas(snapshot):
    for model, nominal in (("a100-80gb", 8), ("a100-80gb-shared", 640), ("t4", 8)):
        snapshot = snapshot.with_quota("alice", model, nominal)
    return snapshot


def _mixed_cluster():
    # One cluster with whole A100 nodes, a shared A100 node (8 x 80 GiB = 640 GiB) and MIG.
    return (
        a_cluster("east")
        .with_nodes("a100-80gb", 1, gpus=8)
        .with_nodes("a100-80gb-shared", 1, gpus=640)
        .with_nodes("a100-80gb-mig-1g.10gb", 1, gpus=7)
    )


def test_shares_pack_onto_the_shared_pool_in_gib_and_whole_jobs_onto_whole_cards():
    snap = (
        _quotas(a_snapshot())
        .with_models(*CATALOG)
        .with_clusters(_mixed_cluster())
        .with_pending(
            a_share("infer", 20, replicas=3),
            a_job("train", gpus=8),
        )
        .build()
    )
    decision = decide(snap)
    got = admitted(decision)
    assert got["infer"].model == "a100-80gb-shared"
    assert got["infer"].gpus_per_replica == 20
    assert got["infer"].node_plan == ("east-a100-80gb-shared-0",) * 3
    assert got["train"].model == "a100-80gb"


def test_a_whole_gpu_job_waits_rather_than_land_on_a_shared_or_mig_node():
    snap = (
        _quotas(a_snapshot())
        .with_models(*CATALOG)
        .with_clusters(
            _mixed_cluster(),
        )
        .with_pending(a_job("busy", gpus=8), a_job("next", gpus=1).submitted(1))
        .build()
    )
    decision = decide(snap)
    assert set(admitted(decision)) == {"busy"}
    assert "next" in reasons_by_job(decision)


def test_a_share_larger_than_the_pool_left_waits_with_a_reason():
    snap = (
        _quotas(a_snapshot())
        .with_models(*CATALOG)
        .with_clusters(a_cluster("east").with_nodes("a100-80gb-shared", 1, gpus=80))
        .with_pending(a_share("big", 60), a_share("second", 30).submitted(1))
        .build()
    )
    decision = decide(snap)
    assert set(admitted(decision)) == {"big"}
    assert "second" in reasons_by_job(decision)


def test_quota_on_a_shared_pool_is_gib():
    snap = (
        _quotas(a_snapshot())
        .with_models(*CATALOG)
        .with_clusters(a_cluster("east").with_nodes("a100-80gb-shared", 1, gpus=640))
        .with_quota("alice", "a100-80gb-shared", nominal=40, borrowing=0)
        .with_pending(a_share("a", 30), a_share("b", 20).submitted(1))
        .build()
    )
    decision = decide(snap)
    assert set(admitted(decision)) == {"a"}
    assert reasons_by_job(decision)["b"].code.name == "QUOTA_EXHAUSTED"


@pytest.mark.parametrize(
    ("memory", "cores", "charged", "fraction"),
    [
        (20, None, 20.0, 0.25),
        (20, 50, 40.0, 0.5),
        (40, 25, 40.0, 0.5),
        (10, 100, 80.0, 1.0),
    ],
    ids=[
        "memory only: a quarter of the card",
        "half the compute outweighs a quarter of the memory",
        "half the memory outweighs a quarter of the compute",
        "all the compute is the whole card",
    ],
)
def test_a_share_is_charged_its_dominant_fraction_of_the_card(memory, cores, charged, fraction):
    assert charged_gib(memory, cores, 80) == charged
    assert gpu_equivalents(memory, cores, 80) == fraction


def test_worked_example_two_half_shares_cost_one_whole_card_hour():
    # docs/scheduling.md: 2 replicas x (20 GiB, 50 % compute) of an A100-80GB for 3 hours.
    per_gib_hour = shared_cost_factor(A100.cost_factor, 80)
    weighted = 2 * charged_gib(20, 50, 80) * 3 * per_gib_hour
    whole_card_for_three_hours = 1 * 3 * A100.cost_factor
    assert weighted == pytest.approx(whole_card_for_three_hours)


def test_messages_about_shares_name_their_unit():
    # "needs 30 GiB of a100-80gb-shared", never "30 × a100-80gb-shared" (issue 32).
    snap = (
        _quotas(a_snapshot())
        .with_models(*CATALOG)
        .with_clusters(a_cluster("east").with_nodes("a100-80gb-shared", 1, gpus=640))
        .with_quota("alice", "a100-80gb-shared", nominal=40, borrowing=0)
        .with_pending(a_share("a", 30), a_share("b", 20, replicas=2).submitted(1))
        .build()
    )
    decision = decide(snap)
    explained = admitted(decision)["a"].explanation.message
    assert explained.startswith("admitted 30 GiB of A100-80GB shared in east")
    assert "within nominal (30 of 40 GiB)" in explained
    waiting = reasons_by_job(decision)["b"].message
    assert waiting.startswith("needs 2 replicas \u00d7 20 GiB of A100-80GB shared; ")
    assert "30 GiB more than the team may use (it uses 30 of 40 GiB nominal" in waiting
    assert "\u00d7 A100-80GB shared" not in explained + waiting


def test_holds_and_reclaims_of_a_shared_pool_count_gib():
    from tests.scheduling.engine.builders import fast_guard, running

    def pool(carol_nominal):
        return (
            _quotas(a_snapshot())
            .with_models(*CATALOG)
            .with_clusters(a_cluster("east").with_nodes("a100-80gb-shared", 1, gpus=80))
            .with_running(
                running(
                    "r0",
                    team="carol",
                    cluster="east",
                    model="a100-80gb-shared",
                    nodes=["east-a100-80gb-shared-0"],
                    gpus=50,
                    started_minutes_ago=10,
                )
            )
            .with_quota("carol", "a100-80gb-shared", nominal=carol_nominal)
            .with_pending(a_share("big", 40).submitted(120))
            .with_pending(a_share("small", 10, team="bob").submitted(1))
            .build()
        )

    held = reasons_by_job(decide(pool(80), fast_guard(60)))
    assert "holding 30 of 40 GiB on 1 node in east" in held["big"].message
    assert "(starvation guard, 30 GiB held)" in held["small"].message
    reclaimed = reasons_by_job(decide(pool(0), fast_guard(60)))["big"]
    assert "team uses 40 of 640 GiB nominal, this job included" in reclaimed.message
