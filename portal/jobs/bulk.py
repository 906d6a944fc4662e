"""A team admin's bulk cancel: many jobs of the teams they administer, one reason for all.

Each job goes through :func:`portal.jobs.services.job_cancel` (the one state change, the
reason on the job and its timeline, its owner notified), so a bulk cancel is only a loop
over what the caller may touch: jobs of teams where they are a team admin (a platform
admin: any team). An id of another team's job is skipped like an unknown one, never named.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from portal.access import AnyUser, team_roles_of
from portal.errors import ApplicationError, Conflict
from portal.jobs.services import job_cancel
from portal.models import TERMINAL_STATES, Job, Role

MAX_BULK = 200


@dataclass
class BulkCancel:
    cancelled: list[Job] = field(default_factory=list)
    skipped: int = 0
    """Ids not cancelled: unknown, not a job of a team the caller administers, or finished."""


def admin_team_ids(user: AnyUser, roles: dict[int, str] | None = None) -> set[int] | None:
    """The teams whose jobs ``user`` may cancel in bulk (None: every team, a platform admin);
    ``roles``: the caller's roles when already read."""
    if user.is_staff:
        return None
    roles = roles if roles is not None else team_roles_of(user)
    return {tid for tid, role in roles.items() if role == Role.ADMIN}


def jobs_cancel_bulk(*, user: AnyUser, public_ids: Iterable[str], reason: object) -> BulkCancel:
    """Cancel the listed jobs the caller administers, each with ``reason`` (required: their
    owners read it). Bad input is an ApplicationError naming the field; nothing is cancelled."""
    if not isinstance(reason, str) or not reason.strip():
        raise ApplicationError(
            "Say why.", fields={"reason": ["A reason is required: each job's owner reads it."]}
        )
    ids = [i for i in dict.fromkeys(public_ids) if isinstance(i, str) and len(i) <= 64]
    if not ids:
        raise ApplicationError("Choose jobs.", fields={"jobs": ["Tick the jobs to cancel."]})
    if len(ids) > MAX_BULK:
        raise ApplicationError(
            "Too many jobs.", fields={"jobs": [f"At most {MAX_BULK} jobs at once."]}
        )
    valid: list[str] = []
    for raw in ids:
        with contextlib.suppress(ValueError):  # a malformed id is skipped like an unknown one
            valid.append(str(uuid.UUID(raw)))
    jobs = Job.objects.filter(public_id__in=valid).exclude(state__in=TERMINAL_STATES)
    teams = admin_team_ids(user)
    if teams is not None:
        jobs = jobs.filter(team_id__in=teams)
    result = BulkCancel()
    for job in jobs.order_by("id"):
        try:
            result.cancelled.append(job_cancel(job=job, by=user, reason=reason))
        except Conflict:  # finished or being preempted meanwhile
            continue
    result.skipped = len(ids) - len(result.cancelled)
    return result
