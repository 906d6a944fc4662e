"""The notices the watch and the hooks make: waiting long and close to the max runtime (once
per job), a team's quota changed (its members, one webhook message), a cluster unreachable or
drained (platform admins)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from clusters.clients import cluster_reachable_mark, cluster_unreachable_mark
from clusters.models import Cluster, ClusterState
from notifications.events import jobs_watch
from notifications.models import Delivery
from notifications.preferences import preferences_set
from notifications.webhooks import webhook_create
from portal.models import JobState, Notification
from scheduling.models import GpuModel
from scheduling.services import quota_set
from tests.factories import JobFactory, UserFactory

pytestmark = pytest.mark.django_db


def _kinds(user) -> list[str]:
    return list(
        Notification.objects.filter(user=user).order_by("pk").values_list("kind", flat=True)
    )


def test_a_job_waiting_past_its_owners_threshold_is_reported_once(bob, alice, vision):
    now = timezone.now()
    long_ago = now - dt.timedelta(minutes=61)
    waiting = JobFactory(team=vision, owner=bob, name="patient", state_changed_at=long_ago)
    younger = JobFactory(team=vision, owner=bob, state_changed_at=now - dt.timedelta(minutes=59))
    preferences_set(user=alice, data={"wait_threshold_minutes": None})  # alice: never
    JobFactory(team=vision, owner=alice, state_changed_at=long_ago)

    [created] = jobs_watch(now=now)
    notice = Notification.objects.get(pk=created)
    assert (notice.user, notice.job, notice.kind) == (bob, waiting, "job.waiting")
    assert notice.title == "patient has waited 61 minutes in the queue"
    assert jobs_watch(now=now + dt.timedelta(seconds=30)) == []  # once per job
    assert _kinds(alice) == []

    preferences_set(user=bob, data={"wait_threshold_minutes": 30})
    other = JobFactory(team=vision, owner=bob, state_changed_at=now - dt.timedelta(minutes=31))
    fresh = JobFactory(team=vision, owner=bob, state_changed_at=now - dt.timedelta(minutes=29))
    told = {Notification.objects.get(pk=i).job for i in jobs_watch(now=now)}
    assert told == {younger, other} and fresh not in told


def test_a_job_close_to_its_max_runtime_is_reported_once(bob, vision):
    now = timezone.now()
    # max runtime 4 h: told 15 minutes before the end (the setting), not before
    job = JobFactory(
        team=vision, owner=bob, name="long", state=JobState.RUNNING, max_runtime_seconds=4 * 3600,
        started_at=now - dt.timedelta(hours=3, minutes=44),
    )  # fmt: skip
    assert jobs_watch(now=now) == []
    [created] = jobs_watch(now=now + dt.timedelta(minutes=2))
    notice = Notification.objects.get(pk=created)
    assert (notice.job, notice.kind) == (job, "job.near_max_runtime")
    assert notice.title == "long reaches its max runtime in 14 minutes"
    assert jobs_watch(now=now + dt.timedelta(minutes=5)) == []
    # A 30-minute job hears of it 3 minutes (a tenth) before its end, not 15.
    short = JobFactory(
        team=vision, owner=bob, state=JobState.RUNNING, max_runtime_seconds=1800,
        started_at=now - dt.timedelta(minutes=20),
    )  # fmt: skip
    assert jobs_watch(now=now) == []
    [created] = jobs_watch(now=now + dt.timedelta(minutes=8))
    assert Notification.objects.get(pk=created).job == short


def test_a_quota_change_tells_every_member_and_the_team_webhook_once(
    catalog, root, alice, bob, victor, charlie, vision, receiver, django_capture_on_commit_callbacks
):
    bob.email = "bob@example.org"
    bob.save()
    preferences_set(user=bob, data={"events": {"team.quota_changed": ["email"]}})
    hook, _ = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["team.quota_changed"]
    )
    t4 = GpuModel.objects.get(key="t4")
    with django_capture_on_commit_callbacks(execute=True):
        quota_set(team=vision, model=t4, nominal=8, borrowing_limit=4, by=root)
    for member in (alice, bob, victor):
        [notice] = Notification.objects.filter(user=member)
        assert notice.kind == "team.quota_changed" and notice.job is None
        assert notice.title == (
            "The Tesla T4 quota of Vision changed: nominal none → 8; borrowing limit none → 4"
        )
        assert notice.message == "Changed by root."
    assert _kinds(charlie) == []  # another team's member
    assert sorted(d.recipient for d in Delivery.objects.all()) == [
        f"user:{bob.pk}",
        f"webhook:{hook.pk}",
    ]
    with django_capture_on_commit_callbacks(execute=True):
        quota_set(team=vision, model=t4, nominal=8, borrowing_limit=4, by=root)
    assert Notification.objects.filter(user=bob).count() == 1  # nothing changed: no notice


def test_a_cluster_becoming_unreachable_or_draining_tells_the_platform_admins(
    root, bob, vision, django_capture_on_commit_callbacks
):
    other_admin = UserFactory(username="ops", is_staff=True)
    root.email = "root@example.org"  # e-mail is off without an address
    root.save()
    cluster = Cluster.objects.create(name="east", api_url="https://k8s.example.org")
    with django_capture_on_commit_callbacks(execute=True):
        cluster_unreachable_mark(cluster, "connection refused")
    for admin in (root, other_admin):
        [notice] = Notification.objects.filter(user=admin)
        assert (notice.kind, notice.title) == ("cluster.unreachable", "Cluster east is unreachable")
        assert notice.message.endswith("UTC: connection refused")
    with django_capture_on_commit_callbacks(execute=True):
        cluster_unreachable_mark(cluster, "still refused")  # still unreachable: no news
    assert Notification.objects.filter(user=root).count() == 1
    with django_capture_on_commit_callbacks(execute=True):
        assert cluster_reachable_mark(cluster)
        cluster_unreachable_mark(cluster, "timed out")  # down again: news again
    assert Notification.objects.filter(user=root).count() == 2

    with django_capture_on_commit_callbacks(execute=True):
        cluster.state = ClusterState.DRAINING
        cluster.save()
        cluster.save()  # saved again while draining: no second notice
    assert _kinds(root) == ["cluster.unreachable", "cluster.unreachable", "cluster.draining"]
    assert _kinds(bob) == []  # not a platform admin
    # Platform admins get these by email by default.
    assert Delivery.objects.filter(user=root, channel="email").count() == 3
