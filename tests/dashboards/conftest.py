"""Builders for dashboard tests: a kubesim scenario's nodes as inventory rows, jobs moved
through their states at chosen times, and the scheduling tests' ``pool`` / ``quota``."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from clusters.models import Cluster, Node
from kubesim.config import build_nodes, load_config
from portal.jobs.state import job_transition
from portal.models import Job, JobState
from scheduling.models import GpuModel
from tests.scheduling.conftest import pool, quota  # noqa: F401  (fixtures, re-exported)

MIG_PREFIX = "nvidia.com/mig-"


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
    won = job_transition(
        job_id=job.pk,
        expected=JobState.QUEUED,
        to=JobState.ADMITTED,
        reason="Admitted",
        updates={
            "cluster_id": cluster.pk,
            "gpu_model_id": GpuModel.objects.get(key=model).pk,
            "node_plan": nodes,
        },
        now=at,
    )
    assert won
    job.refresh_from_db()
    return job


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
