"""What the cluster doctor stores and what it tells: findings replaced each check, the first
sighting kept, and news only for a finding that is new or now concerns more nodes."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.cache import cache
from django.utils import timezone

from clusters.checkup import QUIET_AFTER_FIX, findings_store
from clusters.doctor import Finding
from clusters.models import Cluster, ClusterFinding
from portal.models import Notification

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_fixed_findings_from_earlier_runs() -> None:
    """When each finding was last seen lives in the shared cache, and cluster ids come back in
    a new test database: an earlier run's "seen a minute ago" must not silence this run's news."""
    if hasattr(cache, "delete_pattern"):  # django-redis; the local-memory cache is per process
        cache.delete_pattern("clusters:doctor:reported:*")


def broken(*nodes: str) -> Finding:
    return Finding(
        code="gpus-not-advertised",
        severity="error",
        title=f"{len(nodes)} GPU nodes advertise no GPUs: {', '.join(nodes)}",
        explanation="…",
        fix="…",
        nodes=nodes,
    )


INFO = Finding(code="model-label-missing-gfd", severity="info", title="t", explanation="e", fix="f")


def test_only_new_findings_or_new_nodes_are_news(root, django_capture_on_commit_callbacks):
    cluster = Cluster.objects.create(name="east", api_url="https://k8s.example.org")
    t0 = timezone.now()
    checks = [
        ([broken("a-0"), INFO], ["gpus-not-advertised"]),  # new (the info is never news)
        ([broken("a-0"), INFO], []),  # the same again
        ([broken("a-0", "a-1")], ["gpus-not-advertised"]),  # a second node broke
        ([broken("a-1")], []),  # one fixed: fewer nodes is no news
        ([], []),  # all fixed
        ([broken("a-1")], []),  # back a minute later on the same node: told already
        ([], []),
        ([broken("a-1", "a-2")], ["gpus-not-advertised"]),  # back with a node it did not have
        ([], []),
    ]
    for minute, (findings, news) in enumerate(checks):
        with django_capture_on_commit_callbacks(execute=True):
            assert findings_store(cluster, findings, now=t0 + dt.timedelta(minutes=minute)) == news
    later = t0 + dt.timedelta(minutes=len(checks)) + QUIET_AFTER_FIX
    with django_capture_on_commit_callbacks(execute=True):  # broken again, long after: news
        assert findings_store(cluster, [broken("a-1")], now=later) == ["gpus-not-advertised"]
    (row,) = ClusterFinding.objects.filter(cluster=cluster)
    assert row.first_seen_at == later and row.nodes == ["a-1"]
    titles = list(
        Notification.objects.filter(user=root, kind="cluster.finding")
        .order_by("id")
        .values_list("title", flat=True)
    )
    assert titles == [
        "Cluster east: 1 GPU nodes advertise no GPUs: a-0",
        "Cluster east: 2 GPU nodes advertise no GPUs: a-0, a-1",
        "Cluster east: 2 GPU nodes advertise no GPUs: a-1, a-2",
        "Cluster east: 1 GPU nodes advertise no GPUs: a-1",
    ]
    cluster.refresh_from_db()
    assert cluster.doctor_checked_at == later


def test_nodes_taking_turns_are_told_once_within_the_quiet_hour(
    root, django_capture_on_commit_callbacks
):
    """Two nodes whose device plugins crash in turn: {a-0}, {a-1}, {a-0}, … Each node is news
    the first time; a node already reported within the hour is not news again because the
    other one was broken at the check between."""
    cluster = Cluster.objects.create(name="east", api_url="https://k8s.example.org")
    t0 = timezone.now()
    turns = [
        (["a-0"], ["gpus-not-advertised"]),
        (["a-1"], ["gpus-not-advertised"]),  # a node not reported before
        (["a-0"], []),
        (["a-1"], []),
        (["a-0", "a-1"], []),
        (["a-0"], []),
        (["a-2"], ["gpus-not-advertised"]),
        (["a-1"], []),
    ]
    for minute, (nodes, news) in enumerate(turns):
        with django_capture_on_commit_callbacks(execute=True):
            told = findings_store(cluster, [broken(*nodes)], now=t0 + dt.timedelta(minutes=minute))
            assert told == news, (minute, nodes)
    notices = Notification.objects.filter(user=root, kind="cluster.finding")
    assert notices.count() == 3
    # An hour after a-0 was last seen broken, it is news again.
    later = t0 + dt.timedelta(minutes=5) + QUIET_AFTER_FIX
    with django_capture_on_commit_callbacks(execute=True):
        assert findings_store(cluster, [broken("a-0")], now=later) == ["gpus-not-advertised"]


def test_a_finding_kept_between_checks_keeps_its_first_sighting():
    cluster = Cluster.objects.create(name="east", api_url="https://k8s.example.org")
    t0 = timezone.now()
    findings_store(cluster, [broken("a-0")], now=t0)
    findings_store(cluster, [broken("a-0"), INFO], now=t0 + dt.timedelta(hours=1))
    rows = {r.code: r for r in ClusterFinding.objects.filter(cluster=cluster)}
    assert rows["gpus-not-advertised"].first_seen_at == t0
    assert rows["gpus-not-advertised"].seen_at == t0 + dt.timedelta(hours=1)
    assert rows["model-label-missing-gfd"].first_seen_at == t0 + dt.timedelta(hours=1)
    # Most serious first, as every reader lists them.
    assert [r.severity for r in ClusterFinding.objects.filter(cluster=cluster)] == [
        "error",
        "info",
    ]
