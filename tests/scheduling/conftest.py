"""Builders for scheduling tests against the real database: clusters with GPU nodes, quotas."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from clusters.models import Cluster, Node
from scheduling.models import GpuModel, Quota


@pytest.fixture
def pool(db: Any, catalog: Any):
    """``pool(cluster, model, nodes, gpus)`` adds GPU nodes to a (new) cluster."""

    def add(cluster: str, model: str, nodes: int, gpus: int, **node_fields: Any) -> Cluster:
        c, _ = Cluster.objects.get_or_create(name=cluster, defaults={"api_url": "https://k8s.test"})
        m = GpuModel.objects.get(key=model)
        for i in range(nodes):
            Node.objects.create(
                cluster=c,
                name=f"{model}-{i}",
                gpu_model=m,
                gpu_product=(m.product_labels or [m.key])[0],
                gpu_resource=m.resource_name,
                gpu_capacity=gpus,
                gpu_allocatable=gpus,
                last_seen_at=timezone.now(),
                **node_fields,
            )
        return c

    return add


@pytest.fixture
def quota(db: Any, catalog: Any):
    def set_quota(team: Any, model: str, nominal: int, borrowing_limit: int | None = None) -> Quota:
        return Quota.objects.create(
            team=team,
            gpu_model=GpuModel.objects.get(key=model),
            nominal=nominal,
            borrowing_limit=borrowing_limit,
        )

    return set_quota
