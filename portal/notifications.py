"""In-portal notifications: a user hears of their own jobs' state changes they did not cause.

``job_transition`` calls :func:`notify_job_event` for every event it records, inside its
transaction; only the changes a job's owner would want to hear of become a ``Notification``
(started, succeeded, failed, preempted or requeued, cancelled by someone else), and
:func:`notify_job_fact` of a RUNNING job's restart (RESTARTING, then running again). Delivery
beyond the bell (email, webhooks) hangs off :data:`portal.hooks.notifications_created`: each
listener gets the new notifications' ids once they are committed, and keeps its own record of
what it sent, so that a retried delivery never sends twice and the in-portal list stays the
one truth.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from portal import hooks
from portal.access import AnyUser
from portal.models import Job, JobEvent, JobState, Notification

CANCEL_REASON = "CancelRequested"  # portal.jobs.state.USER_CANCEL_REASON (state imports us)
PREEMPTED_REASON = "Preempted"  # portal.jobs.state.PREEMPTED_REASON


def _notice(event: JobEvent, name: str, actor: str) -> tuple[str, str] | None:
    """(kind, title) for an event its job's owner should hear of, else None."""
    to = event.to_state
    if event.from_state == to:
        return None  # a notable fact (an OOMKill, a retry) is on the timeline, not a state change
    if event.reason == CANCEL_REASON:
        return "job.cancelled", f"{name} was cancelled by {actor or 'an administrator'}"
    if to == JobState.RUNNING:
        return "job.running", f"{name} is running"
    if to == JobState.SUCCEEDED:
        return "job.succeeded", f"{name} succeeded"
    if to == JobState.FAILED:
        return "job.failed", f"{name} failed ({event.reason})"
    if to == JobState.PREEMPTING and event.reason == PREEMPTED_REASON:
        return "job.preempted", f"{name} was preempted; it goes back to the queue in its place"
    if to == JobState.PREEMPTING:
        return "job.requeued", f"{name} is being requeued ({event.reason})"
    return None


def notify_job_event(event: JobEvent) -> Notification | None:
    """Tell the job's owner about ``event`` if it is a change they want to hear of and did not
    make themselves. Runs in the caller's transaction: the notification commits with the event.
    """
    if event.from_state == event.to_state or event.to_state not in _NOTIFYING_STATES:
        return None
    row = Job.objects.filter(pk=event.job_id).values_list("owner_id", "name").first()
    if row is None:
        return None
    owner_id, name = row
    if event.actor_id is not None and event.actor_id == owner_id:
        return None  # your own cancel is not news to you
    actor = event.actor.get_username() if event.actor_id and event.actor else ""
    notice = _notice(event, name, actor)
    if notice is None:
        return None
    kind, title = notice
    return _notify_owner(event, owner_id, kind, title)


def _notify_owner(event: JobEvent, owner_id: int, kind: str, title: str) -> Notification:
    """The owner's notification of ``event``, announced to the delivery wing on commit."""
    created = Notification.objects.create(
        user_id=owner_id,
        job_id=event.job_id,
        event=event,
        kind=kind,
        title=title[:200],
        message=event.message,
        created_at=event.created_at,
    )
    hooks.notifications_created.fire_on_commit([created.pk])
    return created


# Facts of a RUNNING job's restart (``clusters.status``): its status is RESTARTING from the
# first, RUNNING again from the last; the owner hears of both, as of any state change.
RESTART_FACTS = frozenset({"VolcanoRestarting", "PodsPending"})
RESUMED_FACT = "Resumed"


def notify_job_fact(event: JobEvent) -> Notification | None:
    """Tell the job's owner that their RUNNING job is restarting (its pods were stopped and wait
    to be placed again) or running again: the status the job page, REST and the CLI show
    (``Job.status``), so a notification never says less than the page.

    One notice per restart: a restart is noted as ``VolcanoRestarting`` and then
    ``PodsPending``, or only one of them when the watch saw one phase; the second is not
    news, and "running again" follows a "restarting" notice only."""
    if event.reason not in RESTART_FACTS and event.reason != RESUMED_FACT:
        return None
    row = Job.objects.filter(pk=event.job_id).values_list("owner_id", "name", "state").first()
    if row is None or row[2] != JobState.RUNNING:
        return None
    owner_id, name, _ = row
    last = (
        Notification.objects.filter(job_id=event.job_id, kind__startswith="job.")
        .order_by("-created_at", "-id")
        .values_list("kind", flat=True)
        .first()
    )
    restarting = last == "job.restarting"
    if event.reason == RESUMED_FACT:
        if not restarting:
            return None
        kind, title = "job.running", f"{name} is running again"
    else:
        if restarting:
            return None
        kind, title = "job.restarting", f"{name} is restarting; it keeps its GPUs"
    return _notify_owner(event, owner_id, kind, title)


_NOTIFYING_STATES = frozenset(
    {
        JobState.RUNNING,
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.PREEMPTING,
        JobState.CANCELLING,
        JobState.CANCELLED,
    }
)


def notifications_of(user: AnyUser) -> QuerySet[Notification]:
    """The caller's notifications, newest first (nobody reads another user's)."""
    if not user.is_authenticated:
        return Notification.objects.none()
    return Notification.objects.filter(user_id=user.pk).select_related("job")


def unread_count(user: AnyUser) -> int:
    if not user.is_authenticated:
        return 0
    return Notification.objects.filter(user_id=user.pk, read_at__isnull=True).count()


def notifications_mark_read(
    *, user: AnyUser, ids: list[int] | None = None, now: dt.datetime | None = None
) -> int:
    """Mark the caller's notifications read (``ids``, or all); returns how many changed."""
    rows: Any = Notification.objects.filter(user_id=user.pk, read_at__isnull=True)
    if ids is not None:
        rows = rows.filter(pk__in=ids)
    return int(rows.update(read_at=now or timezone.now()))
