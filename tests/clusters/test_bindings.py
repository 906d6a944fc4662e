"""Node plans follow the pods' real bindings, on kubesim over HTTPS: from the watcher even
before the dispatcher writes SUBMITTED, from one reconcile or inventory pass for every job at
once, and from the bindings refresh the scheduler asks for when its books over-count a node.

The drift is made the way a cluster makes it: the portal plans replicas on one node, Volcano
binds them where its own order takes it (here: the jobs are created in the reverse of the
order they were planned in, and kubesim's next-fit fills ``a100-0`` first).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from clusters.bindings import node_plans_apply, pod_bindings
from clusters.clients import cluster_client
from clusters.dispatch import job_dispatch
from clusters.inventory import inventory_sync
from clusters.manifests import job_manifest
from clusters.tasks import cluster_reconcile_and_enqueue
from portal.jobs.services import job_submit
from portal.models import Job, JobState
from rules import volcano
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel, Quota
from tests.clusters.conftest import two_a100, wait_for
from tests.conftest import job_body

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sim_config() -> dict[str, Any]:
    return two_a100(defaultDurationSeconds=3600)


def _truth(sim) -> dict[str, list[str]]:
    """Portal job id → node per replica, as kubesim bound the pods."""
    bound = pod_bindings(sim.list("pods"))
    return {str(u): [nodes[r] for r in sorted(nodes)] for u, nodes in bound.items()}


def _plans(jobs) -> dict[str, list[str]]:
    return {
        str(u): list(p)
        for u, p in Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list(
            "public_id", "node_plan"
        )
    }


def _per_node(plans: dict[str, list[str]]) -> Counter[str]:
    return Counter(node for plan in plans.values() for node in plan)


@pytest.fixture
def drifted(sim, cluster, admit):
    """16 one-GPU jobs running 8 on a100-0 and 8 on a100-1 whose plans all name the other
    node (the books of a portal that lost track), and no watcher runs to say so."""
    jobs = [admit(cluster, nodes=[f"a100-{0 if i < 8 else 1}"], name=f"j{i}") for i in range(16)]
    for job in jobs:
        assert job_dispatch(job_id=job.pk).done
    sim.settle()
    for i, job in enumerate(jobs):
        Job.objects.filter(pk=job.pk).update(node_plan=[f"a100-{1 if i < 8 else 0}"])
    truth = _truth(sim)
    assert _per_node(truth) == {"a100-0": 8, "a100-1": 8}
    assert sum(_plans(jobs)[k] != v for k, v in truth.items()) == 16
    return jobs


def test_a_binding_reported_while_the_job_is_still_admitted_moves_its_plan(
    sim, cluster, admit, watchers
):
    """The pod is bound between the create and the dispatcher's SUBMITTED: that event must
    count (it used to be dropped, and the next one skipped as already seen)."""
    job = admit(cluster, nodes=["a100-0"])
    watchers.start(cluster, "pods")
    namespace, manifest = job_manifest(job)  # pinned to a100-0
    Job.objects.filter(pk=job.pk).update(node_plan=["a100-1"])  # books that drifted meanwhile
    cluster_client(cluster).create_job(namespace, manifest)
    sim.settle()
    assert _truth(sim) == {str(job.public_id): ["a100-0"]}
    assert wait_for(lambda: _plans([job])[str(job.public_id)] == ["a100-0"], timeout=10)
    assert Job.objects.get(pk=job.pk).state == JobState.ADMITTED


def test_one_reconcile_corrects_every_drifted_plan(sim, cluster, drifted):
    result = cluster_reconcile_and_enqueue(cluster=cluster)
    assert result.ok and result.plans_corrected == 16
    assert _plans(drifted) == _truth(sim)


def test_the_inventory_pass_corrects_every_drifted_plan(sim, cluster, drifted):
    assert inventory_sync(cluster=cluster).ok
    assert _plans(drifted) == _truth(sim)


def test_a_full_pool_with_half_corrected_plans_admits_nothing_and_is_repaired(
    sim, cluster, drifted, bob, celery_worker, caplog
):
    """The issue's trial: some bindings arrived, others were lost, so the plans put 16 GPUs on
    an 8-GPU node and none on the other. One more job must wait, the over-count is logged,
    and the refresh it triggers (a real Celery worker) puts every plan where its pod runs."""
    reported = {str(j.public_id) for j in drifted[:8]}  # the bindings that did arrive
    truth = _truth(sim)
    node_plans_apply(
        {u: b for u, b in pod_bindings(sim.list("pods")).items() if str(u) in reported}
    )
    assert _per_node(_plans(drifted)) == {"a100-0": 16}
    Quota.objects.create(
        team=bob.memberships.first().team,
        gpu_model=GpuModel.objects.get(key="a100-80gb"),
        nominal=100,
    )
    extra = job_submit(user=bob, data=job_body(replicas=1, gpus_per_replica=1)).job

    with caplog.at_level(logging.WARNING, logger="scheduling.snapshot"):
        result = run_cycle()
    assert extra.pk not in result.admitted
    extra.refresh_from_db()
    assert (extra.state, extra.pending_reason_code) == (JobState.QUEUED, "NO_CAPACITY")
    assert "node a100-0: 16 GPUs planned" in caplog.text and "8 too many" in caplog.text

    assert wait_for(lambda: _plans(drifted) == truth), _per_node(_plans(drifted))
    assert run_cycle().admitted == []
    assert not [p for p in sim.list("pods") if not p["spec"].get("nodeName")]
    assert all(
        (p["metadata"].get("labels") or {}).get(volcano.LABEL_JOB_ID) != str(extra.public_id)
        for p in sim.list("pods")
    )
