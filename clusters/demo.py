"""The demo's cluster: kubesim (``kubesim/configs/small.yaml``) registered as ``demo``.

``make demo`` starts ``python -m kubesim`` with a fresh token on a free port, writing a
kubeconfig under ``var/``; ``manage.py watch_clusters --demo-kubeconfig`` then registers it
(idempotently: the same cluster row, new credentials each run), reads its inventory, gives the
demo teams quotas if they have none, syncs their queues and starts watching. The small config
only has the namespaces ``team-a`` and ``team-b``, so the demo cluster runs jobs in ``team-a``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from django.contrib.auth import get_user_model

from clusters.inventory import inventory_sync
from clusters.models import Cluster
from clusters.queues import queues_sync
from clusters.registration import cluster_credentials_from_input, cluster_register
from portal.errors import ApplicationError
from portal.models import Team
from scheduling.models import GpuModel, Quota
from scheduling.services import quota_set

log = logging.getLogger(__name__)

DEMO_CLUSTER = "demo"
DEMO_NAMESPACE = "team-a"
# (team slug, model key, nominal, borrowing limit)
DEMO_QUOTAS = (
    ("vision", "a100-80gb", 8, 8),
    ("vision", "v100-32gb", 4, 4),
    ("language", "a100-80gb", 8, 8),
    ("language", "t4", 2, 1),
    ("robotics", "v100-32gb", 4, 0),
    ("robotics", "t4", 1, 1),
)


def demo_quotas_ensure() -> int:
    """Quotas for demo teams that have none (an admin's own edits are never overwritten)."""
    admin = get_user_model().objects.filter(is_staff=True).order_by("pk").first()
    created = 0
    for slug, key, nominal, borrowing in DEMO_QUOTAS:
        team = Team.objects.filter(slug=slug).first()
        model = GpuModel.objects.filter(key=key).first()
        if team is None or model is None:
            continue
        if Quota.objects.filter(team=team, gpu_model=model).exists():
            continue
        quota_set(team=team, model=model, nominal=nominal, borrowing_limit=borrowing, by=admin)
        created += 1
    return created


def demo_cluster_register(kubeconfig: Path) -> Cluster | None:
    """Register (or re-key) the demo cluster from kubesim's kubeconfig; None if not ready."""
    try:
        text = kubeconfig.read_bytes()
    except OSError:
        return None
    try:
        credentials = cluster_credentials_from_input(kubeconfig=text)
        cluster, _ = cluster_register(
            name=DEMO_CLUSTER, credentials=credentials, update=True, namespace=DEMO_NAMESPACE
        )
    except ApplicationError as exc:
        log.warning("demo cluster: %s", exc.message)
        return None
    result = inventory_sync(cluster=cluster)
    if not result.ok:  # a stale kubeconfig from an earlier run, or kubesim still starting
        return None
    demo_quotas_ensure()
    queues_sync(cluster=cluster)
    log.info("demo cluster registered: %s (%s)", cluster.api_url, result.message)
    return cluster


def demo_cluster_wait(kubeconfig: Path, *, timeout: float = 120.0) -> Cluster | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cluster = demo_cluster_register(kubeconfig)
        if cluster is not None:
            return cluster
        time.sleep(1.0)
    return None
