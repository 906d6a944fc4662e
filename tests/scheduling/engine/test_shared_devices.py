"""Shares booked per device: a share is admitted only where one device can hold it.

Issue 31: a shared pool used to be counted in GiB per node, so two devices with 30 GiB free
each "had room" for a 40 GiB share that no device could hold. Nodes that report their
devices (``Node.devices``) are now booked per device, and their CPU and memory count too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rules.engine import (
    Cluster,
    Demand,
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
SHARED = GpuModel(
    key="a100-80gb-shared", name="A100-80GB shared", memory_gib=80, shared_of="a100-80gb"
)


def node(name: str, *devices: int, policy: str = "", cpu: int | None = None) -> Node:
    return Node(
        name=name,
        model=SHARED.key,
        total_gpus=80 * len(devices),
        free_gpus=sum(devices),
        devices=devices,
        device_ids=tuple(f"GPU-{name}-{i}" for i in range(len(devices))),
        device_policy=policy,
        cpu_free=cpu,
    )


def share(job_id: str, gib: int, *, replicas: int = 1, cpu: int = 0, minutes: int = 10):
    return PendingJob(
        id=job_id,
        team="alice",
        submitted_at=NOW - timedelta(minutes=minutes),
        gpus_per_replica=gib,
        replicas=replicas,
        requirement=Requirement(shared=True),
        cpu_milli=cpu,
    )


def snapshot(*nodes: Node, jobs: tuple[PendingJob, ...], demand: tuple[Demand, ...] = ()):
    return Snapshot(
        now=NOW,
        models=(SHARED,),
        teams=(Team(id="alice"),),
        quotas=(Quota(team="alice", model=SHARED.key, nominal=10_000),),
        clusters=(Cluster(id="east", nodes=nodes),),
        pending=jobs,
        demand=demand,
    )


def test_two_devices_with_30_gib_free_cannot_take_a_40_gib_share():
    decision = decide(snapshot(node("n0", 30, 30), jobs=(share("big", 40),)))
    assert decision.admissions == ()
    (reason,) = decision.pending
    assert reason.code is ReasonCode.NO_CAPACITY
    assert "no single device has 40 GiB free" in reason.message
    assert "the most free on one device is 30 GiB" in reason.message


def test_a_share_that_one_device_holds_is_admitted_with_its_device_planned():
    decision = decide(snapshot(node("n0", 30, 30), jobs=(share("small", 30),)))
    (admission,) = decision.admissions
    assert admission.node_plan == ("n0",)
    assert admission.device_plan == ("GPU-n0-0",)


def test_shares_admitted_in_one_cycle_see_each_others_devices():
    # 40 + 40 GiB on one node: the first takes the 40 GiB device, the second has none left.
    decision = decide(
        snapshot(node("n0", 40, 20), jobs=(share("a", 40, minutes=20), share("b", 40)))
    )
    assert [a.job_id for a in decision.admissions] == ["a"]
    assert decision.admissions[0].device_plan == ("GPU-n0-0",)
    # It fit when the cycle began: the job ahead took the one device that held it.
    assert decision.pending[0].code is ReasonCode.WAITING_BEHIND


def test_a_share_larger_than_any_device_can_never_run_and_says_so():
    decision = decide(snapshot(node("n0", 80, 80), jobs=(share("huge", 100),)))
    (reason,) = decision.pending
    assert reason.code is ReasonCode.JOB_TOO_LARGE
    assert "the largest device holds 80 GiB" in reason.message


@pytest.mark.parametrize(
    ("policy", "device"),
    [("binpack", "GPU-n0-0"), ("spread", "GPU-n0-1"), ("", "GPU-n0-0")],
    ids=[
        "binpack: the fullest device that fits, as HAMi's default",
        "spread: the emptiest device",
        "pinned by the portal, no demand given: best fit, the fullest",
    ],
)
def test_the_device_booked_is_the_one_the_clusters_policy_takes(policy, device):
    decision = decide(snapshot(node("n0", 50, 80, policy=policy), jobs=(share("s", 20),)))
    assert decision.admissions[0].device_plan == (device,)


def test_a_node_whose_cpus_are_taken_is_not_planned():
    # n0 has the most room on its devices but no CPU left: its GPUs are stranded.
    decision = decide(
        snapshot(node("n0", 80, 80, cpu=0), node("n1", 30, 0, cpu=8000), jobs=(share("s", 20),))
    )
    assert decision.admissions[0].node_plan == ("n1",)


def test_a_share_that_only_fits_on_cpu_stranded_nodes_waits_and_says_why():
    decision = decide(snapshot(node("n0", 80, 80, cpu=1000), jobs=(share("s", 20, cpu=4000),)))
    (reason,) = decision.pending
    assert "nodes without the CPU or memory it asks" in reason.message


def test_a_gang_of_shares_is_placed_device_by_device():
    decision = decide(snapshot(node("n0", 40, 40, 10), jobs=(share("g", 30, replicas=2),)))
    (admission,) = decision.admissions
    assert admission.node_plan == ("n0", "n0")
    assert sorted(admission.device_plan) == ["GPU-n0-0", "GPU-n0-1"]


def test_with_a_demand_the_share_keeps_the_hole_the_expected_work_needs():
    # Best fit alone would put 20 GiB on n0's 60 GiB device, leaving 40 GiB that the expected
    # 60 GiB shares cannot use; measured against that demand, n1's 80 GiB device takes it
    # and 60 GiB stays usable on both nodes.
    jobs = (share("s", 20),)
    plain = decide(snapshot(node("n0", 60), node("n1", 80), jobs=jobs))
    assert plain.admissions[0].node_plan == ("n0",)
    aware = decide(
        snapshot(node("n0", 60), node("n1", 80), jobs=jobs, demand=(Demand(gpus_per_replica=60),))
    )
    assert aware.admissions[0].node_plan == ("n1",)


def test_nodes_that_report_no_devices_keep_the_node_wide_books():
    # A node without device books counts its free GiB as one device, as before.
    plain = Node(name="n0", model=SHARED.key, total_gpus=160, free_gpus=60)
    decision = decide(snapshot(plain, jobs=(share("s", 40),)))
    assert decision.admissions[0].node_plan == ("n0",)
    assert decision.admissions[0].device_plan == ()
