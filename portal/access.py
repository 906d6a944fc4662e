"""Team isolation: every page, API view and dashboard query goes through these functions.

Another team's job is a 404, never a 403, so its existence does not leak; a viewer who tries to
change something in their own team gets a 403. Platform admins (``is_staff``) see every team.
"""

from __future__ import annotations

import functools

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import QuerySet

from portal.catalog import TeamPolicy
from portal.errors import Forbidden, NotFound
from portal.models import Job, JobState, Membership, Role, Team

AnyUser = AbstractBaseUser | AnonymousUser

SUBMIT_ROLES = frozenset({Role.MEMBER, Role.ADMIN})


def team_roles_of(user: AnyUser) -> dict[int, str]:
    """The caller's role per team id (one query)."""
    if not user.is_authenticated:
        return {}
    return dict(Membership.objects.filter(user_id=user.pk).values_list("team_id", "role"))


def teams_visible_to(user: AnyUser) -> QuerySet[Team]:
    if not user.is_authenticated:
        return Team.objects.none()
    if user.is_staff:
        return Team.objects.all()
    return Team.objects.filter(memberships__user_id=user.pk)


def jobs_visible_to(user: AnyUser) -> QuerySet[Job]:
    """The caller's teams' jobs (every job for platform admins), for lists and dashboards.

    The team ids are read first (one small query) and filtered on as values, not as a
    subquery: with a subquery PostgreSQL cannot tell a small team from a big one, and pages
    newest-first by walking the primary key, which for a team whose jobs are all old means
    reading the whole table (seconds at a million jobs); with the ids it uses the team index.
    """
    if not user.is_authenticated:
        return Job.objects.none()
    if user.is_staff:
        return Job.objects.all()
    team_ids = list(Membership.objects.filter(user_id=user.pk).values_list("team_id", flat=True))
    return Job.objects.filter(team_id__in=team_ids)


def others_ahead(user: AnyUser, job: Job) -> int | None:
    """How many queued jobs the caller cannot see (other teams') are ahead of ``job`` in line:
    a job at position p has p - 1 queued jobs ahead, and those not among the caller's visible
    queued jobs are other teams'. None while the job is not ranked; 0 for a platform admin,
    who sees every job."""
    position = job.queue_position
    if position is None:
        return None
    if user.is_staff:
        return 0
    seen = (
        jobs_visible_to(user)
        .filter(state=JobState.QUEUED, wait__order_key__lt=job.queue_order_key)
        .count()
    )
    return max(0, position - 1 - seen)


def _jobs_visible_by_subquery(user: AnyUser) -> QuerySet[Job]:
    """``jobs_visible_to`` in one query, for look-ups by a unique key, where plans agree."""
    if not user.is_authenticated:
        return Job.objects.none()
    if user.is_staff:
        return Job.objects.all()
    member_teams = Membership.objects.filter(user_id=user.pk).values("team_id")
    return Job.objects.filter(team_id__in=member_teams)


def job_get_for_user(user: AnyUser, public_id: object) -> Job:
    """The job if the caller may see it, else NotFound (also for a malformed id)."""
    try:
        return (
            _jobs_visible_by_subquery(user)
            .select_related("team", "owner", "cluster", "gpu_model", "wait__notes")
            .get(public_id=public_id)
        )
    except (Job.DoesNotExist, ValidationError, ValueError, TypeError) as exc:
        # A malformed UUID is just another job that is not there.
        raise NotFound("Job not found.") from exc


@functools.cache
def _team_with_role_sql() -> str:
    """The team by slug with the caller's role in it (NULL when not a member), its queue
    limits (NULL when none) and its highest allowed priority (NULL when it has no policy);
    names only."""
    qn = connection.ops.quote_name
    team, member, policy = Team._meta, Membership._meta, TeamPolicy._meta
    role, team_id, user_id = (qn(member.get_field(f).column) for f in ("role", "team", "user"))
    members, teams = qn(member.db_table), qn(team.db_table)
    pk, slug = qn(team.pk.column), qn(team.get_field("slug").column)
    policies, policy_team = qn(policy.db_table), qn(policy.get_field("team").column)
    limit = qn(policy.get_field("max_queued_jobs").column)
    own = qn(policy.get_field("max_queued_jobs_per_user").column)
    top = qn(policy.get_field("max_priority").column)
    mine = f"m.{team_id} = t.{pk} AND m.{user_id} = %s"
    return (
        f"SELECT t.*, (SELECT m.{role} FROM {members} m WHERE {mine}) AS caller_role, "  # noqa: S608
        f"p.{limit} AS max_queued_jobs, p.{own} AS max_queued_jobs_per_user, "
        f"p.{top} AS max_priority "
        f"FROM {teams} t LEFT JOIN {policies} p ON p.{policy_team} = t.{pk} WHERE t.{slug} = %s"
    )


def team_for_submit(user: AnyUser, slug: str) -> Team:
    """The team the caller submits to; unknown and not-a-member read the same.

    One query on every submit: the team by slug with the caller's role in it alongside (a
    platform admin sees every team, but submits only where a member or team admin), and the
    team's queue limits and ``max_priority`` (from its scheduling policy) for the submit to
    enforce. Written
    as SQL because building the same query through the ORM costs a submit more CPU than the
    query itself.
    """
    team = None
    if slug and user.is_authenticated:
        team = next(iter(Team.objects.raw(_team_with_role_sql(), [user.pk, slug])), None)
    if team is None or (team.caller_role is None and not user.is_staff):
        raise NotFound(
            "You are not a member of this team.",
            fields={"team": [f"You are not a member of a team {slug!r}."]},
        )
    if team.caller_role not in SUBMIT_ROLES:
        raise Forbidden(
            f"Your role in {team.name} is {team.caller_role or 'none'}; only members and team "
            "admins submit.",
            fields={"team": ["Your role in this team does not allow submitting jobs."]},
        )
    return team


def can_cancel(user: AnyUser, job: Job, roles: dict[int, str] | None = None) -> bool:
    """Owners (still members), team admins, and platform admins may cancel a job."""
    if not user.is_authenticated:
        return False
    if user.is_staff:
        return True
    role = (roles if roles is not None else team_roles_of(user)).get(job.team_id)
    if role == Role.ADMIN:
        return True
    return role == Role.MEMBER and job.owner_id == user.pk


def require_cancel(user: AnyUser, job: Job) -> None:
    if not can_cancel(user, job):
        raise Forbidden("Only the job's owner, a team admin or a platform admin can cancel it.")
