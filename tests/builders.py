"""One way to build the pool's rows in tests: clusters, GPU nodes, and jobs holding GPUs.

Tests of the scheduler, the cluster pages, dispatch and the dashboards all need "a cluster with
nodes of a model" and "a job admitted onto named nodes"; these builders are the one definition
(the catalog fixture must have loaded the GPU models). A job is admitted through
``job_transition``, as the cycle admits it, so its events and timestamps are what the
product writes; ``running_row`` is the shortcut for tests that only need a row in RUNNING.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone

from clusters.models import Cluster, Node
from portal.jobs.state import job_transition
from portal.models import Job, JobState
from scheduling.models import GpuModel
from tests.factories import JobFactory


def a_cluster(name: str = "east", **fields: Any) -> Cluster:
    """The cluster called ``name``, created (at a test API address) if there is none yet."""
    fields.setdefault("api_url", "https://k8s.test")
    return Cluster.objects.get_or_create(name=name, defaults=fields)[0]


def gpu_node(cluster: Cluster, name: str, model: str, gpus: int = 8, **fields: Any) -> Node:
    """A node seen just now with ``gpus`` allocatable GPUs of catalog model ``model``.

    ``capacity`` (default ``gpus``) sets the installed count; other ``fields`` (``ready``,
    ``schedulable``, ``gpus_used_by_others``, ``labels``, ``gpu_product`` …) go to the row.
    """
    m = GpuModel.objects.get(key=model)
    fields.setdefault("gpu_product", (m.product_labels or [m.key])[0])
    fields.setdefault("gpu_resource", m.resource_name)
    fields.setdefault("last_seen_at", timezone.now())
    return Node.objects.create(
        cluster=cluster,
        name=name,
        gpu_model=m,
        gpu_capacity=fields.pop("capacity", gpus),
        gpu_allocatable=gpus,
        **fields,
    )


def gpu_nodes(cluster: str, model: str, nodes: int, gpus: int, **fields: Any) -> Cluster:
    """``nodes`` nodes named ``<model>-<i>`` with ``gpus`` GPUs each, in cluster ``cluster``."""
    c = a_cluster(cluster)
    for i in range(nodes):
        gpu_node(c, f"{model}-{i}", model, gpus, **fields)
    return c


def admit(
    job: Job,
    *,
    cluster: Cluster,
    model: str,
    plan: list[str],
    now: dt.datetime | None = None,
    message: str = "",
) -> Job:
    """Admit a queued ``job`` onto ``plan`` (a node name per replica), as the cycle would."""
    assert job_transition(
        job_id=job.pk,
        expected=JobState.QUEUED,
        to=JobState.ADMITTED,
        reason="Admitted",
        message=message,
        updates={
            "cluster_id": cluster.pk,
            "gpu_model_id": GpuModel.objects.get(key=model).pk,
            "node_plan": plan,
        },
        now=now,
    )
    job.refresh_from_db()
    return job


def admitted_job(
    *, cluster: Cluster, model: str, plan: list[str], message: str = "", **job_fields: Any
) -> Job:
    """A new job (``JobFactory`` fields) with a replica per ``plan`` entry, admitted onto it."""
    job_fields.setdefault("replicas", len(plan))
    job = JobFactory(**job_fields)
    return admit(job, cluster=cluster, model=model, plan=plan, message=message)


def running_row(*, model: str = "a100-80gb", gpus: int = 1, **job_fields: Any) -> Job:
    """A one-replica job row already in RUNNING on ``gpus`` GPUs of ``model`` (no history)."""
    job_fields.setdefault("replicas", 1)
    return JobFactory(
        state=JobState.RUNNING,
        gpu_model=GpuModel.objects.get(key=model),
        gpus_per_replica=gpus,
        **job_fields,
    )
