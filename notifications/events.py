"""The notices the portal core does not make itself: a job waiting long or close to its max
runtime (the beat's watch, once per job), a team's quota changed (its members), a cluster
unreachable or drained (platform admins).

The job state changes (started, succeeded, failed, preempted, requeued, cancelled by someone
else) are made by ``portal.notifications`` inside ``job_transition``; everything here writes
the same ``Notification`` rows, so the bell, the REST list and every channel treat them alike.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from clusters.models import Cluster, ClusterFinding, ClusterState
from notifications.outbox import deliveries_enqueue, fan_out, fan_out_and_enqueue
from notifications.preferences import preferences_of_many
from portal import hooks
from portal.models import Job, JobState, Membership, Notification
from scheduling.models import QuotaChange

log = logging.getLogger(__name__)


F = TypeVar("F", bound=Callable[..., Any])


def _never_raises(listener: F) -> F:
    """A hook listener runs after the change committed: its failure is logged, never raised
    into the request or task that made the change (the change stands; only the notice is
    lost, and the log says so)."""

    @functools.wraps(listener)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return listener(*args, **kwargs)
        except Exception:
            log.exception("%s failed; no notice for this change", listener.__name__)
            return []

    return wrapper  # type: ignore[return-value]


def _create_once(**fields: Any) -> Notification | None:
    """A once-per-job notice, unless one exists (the partial unique constraint decides, so two
    beat runs or workers racing make one)."""
    try:
        with transaction.atomic():
            return Notification.objects.create(**fields)
    except IntegrityError:
        return None


def runtime_margin(max_runtime_seconds: int) -> dt.timedelta:
    """How long before its max runtime a job's owner is told: the setting, at most a tenth of
    the runtime (a 30-minute job is not "close to its end" at minute 15)."""
    margin = settings.GPUPOOL_NOTIFY_RUNTIME_MARGIN_MINUTES * 60
    return dt.timedelta(seconds=min(margin, max_runtime_seconds // 10))


def jobs_watch(*, now: dt.datetime | None = None) -> list[int]:
    """Notify the owners of queued jobs that have waited past their threshold and of running
    jobs close to their max runtime, once per job. Returns the new notifications' ids."""
    now = now or timezone.now()
    created: list[int] = []
    queued = list(
        Job.objects.filter(
            state=JobState.QUEUED, state_changed_at__lte=now - dt.timedelta(minutes=1)
        )
        .exclude(notifications__kind="job.waiting")
        .values("pk", "owner_id", "name", "state_changed_at", "wait__reason")[:5000]
    )
    prefs = preferences_of_many(sorted({j["owner_id"] for j in queued}))
    for job in queued:
        threshold = prefs[job["owner_id"]].wait_threshold_minutes
        if threshold is None or job["state_changed_at"] > now - dt.timedelta(minutes=threshold):
            continue
        waited = int((now - job["state_changed_at"]).total_seconds() // 60)
        n = _create_once(
            user_id=job["owner_id"],
            job_id=job["pk"],
            kind="job.waiting",
            title=f"{job['name']} has waited {waited} minutes in the queue",
            message=job["wait__reason"] or "",
            created_at=now,
        )
        if n is not None:
            created.append(n.pk)
    running = Job.objects.filter(state=JobState.RUNNING, started_at__isnull=False).exclude(
        notifications__kind="job.near_max_runtime"
    )
    for job in running.values("pk", "owner_id", "name", "started_at", "max_runtime_seconds")[:5000]:
        deadline = job["started_at"] + dt.timedelta(seconds=job["max_runtime_seconds"])
        margin = runtime_margin(job["max_runtime_seconds"])
        if now < deadline - margin or now >= deadline:
            continue
        left = max(1, int((deadline - now).total_seconds() // 60))
        n = _create_once(
            user_id=job["owner_id"],
            job_id=job["pk"],
            kind="job.near_max_runtime",
            title=f"{job['name']} reaches its max runtime in {left} minutes",
            message=f"It is stopped at {deadline:%Y-%m-%d %H:%M} UTC (FAILED MaxRuntimeExceeded);"
            " save a checkpoint now.",
            created_at=now,
        )
        if n is not None:
            created.append(n.pk)
    if created:
        hooks.notifications_created.fire_on_commit(created)
    return created


def _notify_users(
    user_ids: list[int], *, kind: str, title: str, message: str, team_id: int | None = None
) -> list[int]:
    """One notification per user (no job), fanned out on commit; a team's webhooks get one
    message for the whole team (through the first row)."""
    now = timezone.now()
    rows = Notification.objects.bulk_create(
        [
            Notification(user_id=uid, kind=kind, title=title[:200], message=message, created_at=now)
            for uid in sorted(set(user_ids))
        ]
    )
    ids = [n.pk for n in rows]
    if not ids:
        return []
    webhooks_for = {ids[0]: team_id} if team_id is not None else {}

    def deliver() -> None:
        try:
            deliveries_enqueue(fan_out(ids, webhooks_for=webhooks_for))
        except Exception:
            log.exception("notification fan-out failed; the sweep will retry it")

    transaction.on_commit(deliver)
    return ids


@_never_raises
def quota_changed(change_ids: list[int]) -> list[int]:
    """The listener of ``portal.hooks.quota_changed``: tell a team's members (every role) that
    its quota changed, one notice per edit, listing each field old → new and who changed it."""
    changes = list(
        QuotaChange.objects.filter(pk__in=change_ids, team__isnull=False)
        .select_related("team", "gpu_model", "changed_by")
        .order_by("pk")
    )
    if not changes:
        return []
    first = changes[0]
    team = first.team
    assert team is not None
    model = first.gpu_model.display_name if first.gpu_model else ""
    fields = "; ".join(
        f"{c.field.replace('_', ' ')} {c.old_value or 'none'} → {c.new_value or 'none'}"
        for c in changes
    )
    by = first.changed_by.get_username() if first.changed_by else "an administrator"
    members = list(Membership.objects.filter(team=team).values_list("user_id", flat=True))
    with transaction.atomic():
        return _notify_users(
            members,
            kind="team.quota_changed",
            title=f"The {model} quota of {team.name} changed: {fields}",
            message=f"Changed by {by}.",
            team_id=team.pk,
        )


def _platform_admins() -> list[int]:
    return list(
        get_user_model().objects.filter(is_staff=True, is_active=True).values_list("pk", flat=True)
    )


@_never_raises
def cluster_unreachable(cluster_id: int) -> list[int]:
    """The listener of ``portal.hooks.cluster_unreachable``: tell the platform admins."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None or cluster.unreachable_since is None:
        return []  # reachable again already: nothing to say
    with transaction.atomic():
        return _notify_users(
            _platform_admins(),
            kind="cluster.unreachable",
            title=f"Cluster {cluster.name} is unreachable",
            message=f"Since {cluster.unreachable_since:%Y-%m-%d %H:%M:%S} UTC: "
            f"{cluster.unreachable_error}",
        )


@_never_raises
def cluster_findings(cluster_id: int, keys: list[str]) -> list[int]:
    """The listener of ``portal.hooks.cluster_findings``: tell the platform admins what the
    cluster doctor found that was not there before (one notice per check, however many)."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return []
    findings = list(ClusterFinding.objects.filter(cluster=cluster, key__in=keys))
    if not findings:
        return []  # gone again already (a later check replaced them): nothing to say
    if len(findings) == 1:
        (only,) = findings
        title = f"Cluster {cluster.name}: {only.title}"
        message = f"{only.explanation}\n\nFix: {only.fix}"
    else:
        title = f"Cluster {cluster.name}: the cluster doctor found {len(findings)} new problems"
        message = "\n".join(f"- {f.get_severity_display()}: {f.title}" for f in findings)
        message += "\n\nThe cluster page explains each, with the fix."
    with transaction.atomic():
        return _notify_users(
            _platform_admins(), kind="cluster.finding", title=title, message=message
        )


def cluster_state_remember(sender: Any, instance: Cluster, **_: Any) -> None:
    """``pre_save`` of Cluster: note the state it had, to tell a drain from other saves."""
    if instance.pk is None:
        instance._state_before = None  # type: ignore[attr-defined]
        return
    instance._state_before = (  # type: ignore[attr-defined]
        Cluster.objects.filter(pk=instance.pk).values_list("state", flat=True).first()
    )


def cluster_state_saved(sender: Any, instance: Cluster, created: bool, **_: Any) -> None:
    """``post_save`` of Cluster: a cluster that now drains (and did not) is news to the
    platform admins, told once the save commits (never inside the saving transaction)."""
    before = getattr(instance, "_state_before", None)
    if instance.state != ClusterState.DRAINING or before == ClusterState.DRAINING or created:
        return
    transaction.on_commit(functools.partial(cluster_drained, instance.pk))


@_never_raises
def cluster_drained(cluster_id: int) -> list[int]:
    cluster = Cluster.objects.filter(pk=cluster_id, state=ClusterState.DRAINING).first()
    if cluster is None:
        return []
    with transaction.atomic():
        return _notify_users(
            _platform_admins(),
            kind="cluster.draining",
            title=f"Cluster {cluster.name} is draining",
            message="Running jobs finish there; nothing new is placed on it.",
        )


__all__ = [
    "cluster_drained",
    "cluster_findings",
    "cluster_state_remember",
    "cluster_state_saved",
    "cluster_unreachable",
    "fan_out_and_enqueue",
    "jobs_watch",
    "quota_changed",
    "runtime_margin",
]
