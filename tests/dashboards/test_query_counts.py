"""No N+1: every dashboard page and endpoint runs the same number of SQL queries with a few
teams, nodes, jobs and snapshots as with many times more."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from clusters.models import Cluster, Node
from dashboards.metrics import metrics_cache_forget
from dashboards.models import QueueWait
from dashboards.snapshots import snapshot_downsample, snapshot_take
from portal.models import Job, JobState, Membership, Role
from scheduling.models import GpuModel, Quota, TeamPolicy, UsageRecord
from tests.factories import JobFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

URLS = [
    "/",
    "/?fragment=live",
    "/?fragment=chart&range=7d",
    "/?range=1h&model=a100-80gb",
    "/pool/clusters/",
    "/fair-share/",
    "/fair-share/?range=24h",
    "/queue/",
    "/usage/",
    "/usage/?scope=vision&period=month",
    "/usage/export.csv?scope=vision",
    "/api/v1/pool/",
    "/api/v1/pool/history/?since=2h",
    "/api/v1/pool/history/?since=7d&model=a100-80gb",
    "/api/v1/teams/vision/usage/",
    "/api/v1/queue/stats/",
    "/api/v1/fair-share/",
    "/metrics",
]
_serial = itertools.count()


def grow(n: int, *, vision, bob) -> None:
    """Add ``n`` teams (each with quota, a running and a queued job, usage and waits), ``n``
    nodes per model on a new cluster, then take snapshots over two hours and downsample."""
    now = timezone.now()
    a100, t4 = GpuModel.objects.get(key="a100-80gb"), GpuModel.objects.get(key="t4")
    cluster = Cluster.objects.create(name=f"c{next(_serial)}", api_url="https://k8s.test")
    Node.objects.bulk_create(
        Node(
            cluster=cluster,
            name=f"{m.key}-{i}",
            gpu_model=m,
            gpu_capacity=8,
            gpu_allocatable=8,
            last_seen_at=now,
            ready=i % 5 != 1,
            schedulable=i % 7 != 2,
        )
        for m in (a100, t4)
        for i in range(n)
    )
    for i in range(n):
        team = TeamFactory()
        member = UserFactory()
        Membership.objects.create(user=member, team=team, role=Role.MEMBER)
        TeamPolicy.objects.create(team=team, weight=1 + i % 3)
        Quota.objects.create(team=team, gpu_model=a100, nominal=4)
        Quota.objects.create(team=team, gpu_model=t4, nominal=2)
        running = JobFactory(
            team=team,
            owner=member,
            state=JobState.RUNNING,
            cluster=cluster,
            gpu_model=a100,
            gpus_per_replica=2,
            node_plan=[f"a100-80gb-{i}"],
            started_at=now - dt.timedelta(hours=1),
        )
        JobFactory(team=team, owner=member, min_gpu_memory_gib=8 + i)  # queued, own requirement
        QueueWait.objects.create(
            event_id=10_000_000 + running.pk,
            job=running,
            team=team,
            gpu_model=a100,
            gpus=2,
            queued_at=now - dt.timedelta(hours=2),
            started_at=now - dt.timedelta(hours=1),
            wait_seconds=3600,
        )
        UsageRecord.objects.create(
            team=team,
            user=member,
            gpu_model=a100,
            hour=now.replace(minute=0, second=0, microsecond=0),
            gpu_hours=2,
            weighted_gpu_hours=2,
        )
    JobFactory(team=vision, owner=bob, state=JobState.RUNNING, cluster=cluster, gpu_model=t4)
    UsageRecord.objects.create(
        team=vision,
        user=bob,
        gpu_model=t4,
        hour=now - dt.timedelta(days=1 + n),
        gpu_hours=1,
        weighted_gpu_hours=0.27,
    )
    for minutes in (150, 100, 61, 30, 1):
        snapshot_take(now=now - dt.timedelta(minutes=minutes) - dt.timedelta(seconds=n))
    snapshot_downsample(now=now)


METRICS_TOKEN = "query-count-scrape-token"


@pytest.fixture(autouse=True)
def _metrics_token(settings):
    settings.GPUPOOL_METRICS_TOKEN = METRICS_TOKEN  # /metrics answers nobody without one


def _counts(client) -> dict[str, int]:
    # /metrics caches the finished-job counts: measure the uncached scrape
    metrics_cache_forget()
    out = {}
    for url in URLS:
        with CaptureQueriesContext(connection) as queries:
            scrape = {"HTTP_AUTHORIZATION": f"Bearer {METRICS_TOKEN}"} if url == "/metrics" else {}
            response = client.get(url, REMOTE_ADDR="127.0.0.1", **scrape)
            if hasattr(response, "streaming_content"):
                b"".join(response.streaming_content)
        assert response.status_code == 200, (url, response.status_code)
        out[url] = len(queries)
    return out


def test_query_counts_stay_constant_as_rows_grow(client, catalog, vision, bob, root):
    client.force_login(bob)
    grow(2, vision=vision, bob=bob)
    small = _counts(client)
    grow(12, vision=vision, bob=bob)
    large = _counts(client)
    assert Job.objects.count() > 25
    assert large == small
    assert max(small.values()) <= 25, small
    client.force_login(root)  # the admin's cluster view adds idle allocations: still constant
    with CaptureQueriesContext(connection) as first:
        client.get("/pool/clusters/")
    grow(5, vision=vision, bob=bob)
    with CaptureQueriesContext(connection) as second:
        client.get("/pool/clusters/")
    assert len(first) == len(second)
