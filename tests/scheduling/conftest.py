"""Builders for scheduling tests against the real database: clusters with GPU nodes, quotas."""

from __future__ import annotations

from typing import Any

import pytest

from clusters.models import Cluster
from scheduling.models import GpuModel, Quota
from tests.builders import gpu_nodes


@pytest.fixture
def pool(db: Any, catalog: Any):
    """``pool(cluster, model, nodes, gpus)`` adds GPU nodes to a (new) cluster."""

    def add(cluster: str, model: str, nodes: int, gpus: int, **node_fields: Any) -> Cluster:
        return gpu_nodes(cluster, model, nodes, gpus, **node_fields)

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
