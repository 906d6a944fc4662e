"""Builders for dashboard tests: a kubesim scenario's nodes as inventory rows, jobs moved
through their states at chosen times, and the scheduling tests' ``pool`` / ``quota``."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from clusters.models import Cluster, Node
from kubesim.config import build_nodes, load_config
from portal.jobs.services import job_submit
from portal.jobs.state import job_transition
from portal.models import Job, JobState
from scheduling.models import GpuModel, Quota
from tests.builders import admit
from tests.conftest import job_body
from tests.scheduling.conftest import pool, quota  # noqa: F401  (fixtures, re-exported)

MIG_PREFIX = "nvidia.com/mig-"
NOW = dt.datetime(2025, 3, 4, 10, 30, 15, tzinfo=dt.UTC)


def inventory_from_kubesim(
    cluster: Cluster, scenario: str | dict[str, Any] = "small", **overrides: dict[str, Any]
) -> list[Node]:
    """Node rows for a kubesim scenario's nodes, mapped the way the inventory sync maps them:
    the ``gpu-type`` label names the catalog model, each MIG resource is a row of its own on the
    slice model ``<model>-mig-<profile>``. ``overrides`` sets fields per node name, e.g.
    ``{"a100-1": {"ready": False}}``."""
    models = {m.key: m for m in GpuModel.objects.all()}
    rows = []
    for node in build_nodes(load_config(scenario)):
        name = node["metadata"]["name"]
        labels = node["metadata"]["labels"]
        allocatable = node["status"]["allocatable"]
        for resource, count in sorted(allocatable.items()):
            if resource == "nvidia.com/gpu":
                model = models.get(labels.get("gpu-type", ""))
            elif resource.startswith(MIG_PREFIX):
                model = models.get(f"{labels.get('gpu-type')}-mig-{resource[len(MIG_PREFIX) :]}")
            else:
                continue
            fields = {
                "gpu_model": model,
                "gpu_product": labels.get("nvidia.com/gpu.product", ""),
                "gpu_capacity": int(count),
                "gpu_allocatable": int(count),
                "last_seen_at": timezone.now(),
                **overrides.get(name, {}),
            }
            rows.append(Node(cluster=cluster, name=name, gpu_resource=resource, **fields))
    return Node.objects.bulk_create(rows)


@pytest.fixture
def kubesim_cluster(db: Any, catalog: Any):
    """``kubesim_cluster(name, scenario="small", **overrides)``: a cluster with that inventory."""

    def make(name: str = "east", scenario: str = "small", **overrides: Any) -> Cluster:
        cluster = Cluster.objects.create(name=name, api_url="https://k8s.test")
        inventory_from_kubesim(cluster, scenario, **overrides)
        return cluster

    return make


def place(job: Job, *, cluster: Cluster, model: str, nodes: list[str], at: dt.datetime) -> Job:
    """Admit a queued job onto named nodes (one per replica), as the cycle would."""
    return admit(job, cluster=cluster, model=model, plan=nodes, now=at)


def start(job: Job, *, at: dt.datetime) -> Job:
    """ADMITTED → SUBMITTED → RUNNING at ``at``."""
    assert job_transition(
        job_id=job.pk, expected=JobState.ADMITTED, to=JobState.SUBMITTED, reason="Created", now=at
    )
    assert job_transition(
        job_id=job.pk, expected=JobState.SUBMITTED, to=JobState.RUNNING, reason="Running", now=at
    )
    job.refresh_from_db()
    return job


@pytest.fixture
def scenario(kubesim_cluster, alice, bob, charlie, vision, language):
    """kubesim's ``small`` cluster (2 x 8 A100, 1 A100 with 4 whole GPUs and MIG slices,
    2 x 4 V100, 3 x 1 T4) with: a running 1 x 8 A100 job and an admitted 2 x 2 on a100-1
    (Vision, nominal 8 A100), one foreign pod on the MIG node's whole GPUs, v100-1 cordoned,
    t4-2 NotReady, and two queued jobs (Language 2 x 4 on V100, Vision 1 x 1 on T4)."""
    east = kubesim_cluster("east")
    Node.objects.filter(cluster=east, name="a100-mig-0", gpu_resource="nvidia.com/gpu").update(
        gpus_used_by_others=1
    )
    Node.objects.filter(cluster=east, name="v100-1").update(schedulable=False)
    Node.objects.filter(cluster=east, name="t4-2").update(ready=False)
    Quota.objects.create(team=vision, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=8)
    before = timezone.now() - dt.timedelta(hours=1)
    big = job_submit(
        user=alice, data=job_body(name="big", replicas=1, gpus_per_replica=8), now=before
    ).job
    start(place(big, cluster=east, model="a100-80gb", nodes=["a100-0"], at=before), at=before)
    pair = job_submit(
        user=bob, data=job_body(name="pair", replicas=2, gpus_per_replica=2), now=before
    ).job
    place(pair, cluster=east, model="a100-80gb", nodes=["a100-1", "a100-1"], at=before)
    job_submit(
        user=charlie,
        data=job_body(
            team="language",
            replicas=2,
            gpus_per_replica=4,
            gpu_models=["v100-32gb"],
            min_gpu_memory_gib=None,
        ),
        now=before,
    )
    # Language's quota is set after its 2 x 4 job was queued: as asked now, the submit would
    # refuse a job larger than the team's quota can ever give (scheduling/quota_check.py), but
    # a quota lowered under queued jobs leaves such a job waiting, as this one does.
    Quota.objects.create(team=language, gpu_model=GpuModel.objects.get(key="v100-32gb"), nominal=4)
    job_submit(
        user=bob,
        data=job_body(replicas=1, gpus_per_replica=1, gpu_models=["t4"], min_gpu_memory_gib=None),
        now=before,
    )
    return east
