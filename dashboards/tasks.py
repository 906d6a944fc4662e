"""Celery tasks of the dashboards: thin wrappers, each idempotent (see ``snapshots``)."""

from __future__ import annotations

import logging

from celery import shared_task

from dashboards.dcgm import gpu_metrics_collect_all
from dashboards.snapshots import (
    queue_waits_collect,
    snapshot_downsample,
    snapshot_prune,
    snapshot_take,
)

log = logging.getLogger(__name__)


@shared_task(name="dashboards.snapshot", ignore_result=True)
def snapshot_task() -> None:
    result = snapshot_take()
    waits = queue_waits_collect()
    log.debug("snapshot %s written=%s, %d waits", result.at, result.written, waits)


@shared_task(name="dashboards.downsample", ignore_result=True)
def downsample_task() -> None:
    snapshot_downsample()


@shared_task(name="dashboards.prune", ignore_result=True)
def prune_task() -> None:
    snapshot_prune()


@shared_task(name="dashboards.collect_gpu_metrics", ignore_result=True)
def collect_gpu_metrics_task() -> None:
    for result in gpu_metrics_collect_all():
        if not result.ok:
            log.warning("GPU metrics of %s unavailable: %s", result.cluster, result.message)
