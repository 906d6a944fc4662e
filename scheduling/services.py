"""Quota and policy writers (audited) and the read models of the queue and the quota grid."""

from __future__ import annotations

import datetime as dt
import re
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Count, F, Q, Sum
from django.db.models.fields.json import KeyTextTransform
from django.utils import timezone

from portal import db, hooks
from portal.access import teams_visible_to
from portal.errors import ApplicationError
from portal.jobs.waits import queue_positions_fill
from portal.models import HOLDING_STATES, Job, JobState, Priority, Team
from rules.capacity import pool_capacity
from scheduling.inventory import Node
from scheduling.models import (
    DEFAULT_COHORT_SLUG,
    Cohort,
    CohortQuota,
    GpuModel,
    Quota,
    QuotaChange,
    TeamPolicy,
)

AnyUser = AbstractBaseUser | AnonymousUser


MAX_QUOTA_GPUS = 1_000_000
"""The most GPUs a quota or limit may name: more than any pool has, well inside the column."""
_WHOLE_NUMBER = re.compile(r"-?[0-9]{1,18}")


def _validate_limit(name: str, value: Any, *, nullable: bool) -> int | None:
    if value is None or value == "":
        if nullable:
            return None
        raise ApplicationError(f"{name} is required.", fields={name: ["This field is required."]})
    if isinstance(value, bool) or not isinstance(value, int):
        text = str(value).strip()
        if not _WHOLE_NUMBER.fullmatch(text):  # ASCII only: int() also reads "١٢"
            raise ApplicationError(
                f"{name} must be a whole number.", fields={name: ["Must be a whole number."]}
            )
        value = int(text)
    if value < 0:
        raise ApplicationError(f"{name} cannot be negative.", fields={name: ["Must be 0 or more."]})
    if value > MAX_QUOTA_GPUS:
        raise ApplicationError(
            f"{name} is too large.", fields={name: [f"At most {MAX_QUOTA_GPUS:,}."]}
        )
    return value


@transaction.atomic
def quota_set(
    *,
    team: Team,
    model: GpuModel,
    nominal: Any,
    borrowing_limit: Any = None,
    lending_limit: Any = None,
    by: AnyUser,
    now: dt.datetime | None = None,
) -> Quota:
    """Create or change a team's quota on a model; every changed field is audited."""
    values = {
        "nominal": _validate_limit("nominal", nominal, nullable=False),
        "borrowing_limit": _validate_limit("borrowing_limit", borrowing_limit, nullable=True),
        "lending_limit": _validate_limit("lending_limit", lending_limit, nullable=True),
    }
    quota = Quota.objects.select_for_update().filter(team=team, gpu_model=model).first()
    old = {k: getattr(quota, k) for k in values} if quota else dict.fromkeys(values)
    if quota is None:
        quota = Quota(team=team, gpu_model=model)
    for k, v in values.items():
        setattr(quota, k, v)
    quota.save()
    now = now or timezone.now()
    changes = QuotaChange.objects.bulk_create(
        [
            QuotaChange(
                team=team,
                gpu_model=model,
                field=k,
                old_value="" if old[k] is None else str(old[k]),
                new_value="" if v is None else str(v),
                changed_by_id=by.pk,
                changed_at=now,
            )
            for k, v in values.items()
            if old[k] != v
        ]
    )
    if changes:  # the team's members hear of it (notifications), once this commits
        hooks.quota_changed.fire_on_commit([c.pk for c in changes])
    return quota


def pool_cohort() -> Cohort:
    """The ``default`` cohort: every team that names no cohort is in it, so its own quota is
    capacity owned by the pool (created the first time it is needed)."""
    cohort, _ = Cohort.objects.get_or_create(
        slug=DEFAULT_COHORT_SLUG, defaults={"name": "Default (the pool)"}
    )
    return cohort


@transaction.atomic
def cohort_quota_set(
    *, cohort: Cohort, model: GpuModel, nominal: Any, by: AnyUser, now: dt.datetime | None = None
) -> CohortQuota:
    """Create or change the GPUs of ``model`` a cohort owns; audited like team quotas.

    Nominal 0 keeps the row (and its history) but lends nothing.
    """
    value = _validate_limit("nominal", nominal, nullable=False)
    quota = CohortQuota.objects.select_for_update().filter(cohort=cohort, gpu_model=model).first()
    old = quota.nominal if quota else None
    if quota is None:
        quota = CohortQuota(cohort=cohort, gpu_model=model)
    quota.nominal = value  # type: ignore[assignment]
    quota.save()
    if old != value:
        QuotaChange.objects.create(
            cohort=cohort,
            gpu_model=model,
            field="cohort_nominal",
            old_value="" if old is None else str(old),
            new_value=str(value),
            changed_by_id=by.pk,
            changed_at=now or timezone.now(),
        )
    return quota


def cohort_quotas() -> list[CohortQuota]:
    """Every cohort's own quota (pool-level figures: every signed-in user may read them)."""
    return list(CohortQuota.objects.select_related("cohort", "gpu_model"))


TEAM_POLICY_FIELDS = (
    "weight",
    "cohort",
    "held",
    "held_reason",
    "max_queued_jobs",
    "max_queued_jobs_per_user",
    "max_priority",
    "min_runtime_minutes",
    "termination_grace_seconds",
)


def team_policies_visible_to(user: AnyUser, *, slug: str | None = None) -> list[TeamPolicy]:
    """The policy of every team the caller sees (platform admins: all), by team name; a team
    without a row gets an unsaved one with the defaults, which is what the scheduler uses."""
    teams = teams_visible_to(user).distinct().order_by("name")
    if slug is not None:
        teams = teams.filter(slug=slug)
    teams_list = list(teams)
    stored = {
        p.team_id: p
        for p in TeamPolicy.objects.filter(team__in=teams_list).select_related("cohort")
    }
    policies = []
    for team in teams_list:
        policy = stored.get(team.pk) or TeamPolicy(team=team)
        policy.team = team
        policies.append(policy)
    return policies


@transaction.atomic
def team_policy_set(
    *, team: Team, by: AnyUser, now: dt.datetime | None = None, **changes: Any
) -> TeamPolicy:
    """Change a team's weight, cohort, hold, queue limit or highest allowed priority; audited
    like quotas."""
    unknown = set(changes) - set(TEAM_POLICY_FIELDS)
    if unknown:
        raise ApplicationError(f"Unknown policy field(s): {sorted(unknown)}")
    if "weight" in changes and (
        not isinstance(changes["weight"], int | float) or changes["weight"] <= 0
    ):
        raise ApplicationError("weight must be positive.", fields={"weight": ["Must be > 0."]})
    if "max_priority" in changes and changes["max_priority"] not in Priority.values:
        names = ", ".join(p.label for p in Priority)
        raise ApplicationError("Unknown priority.", fields={"max_priority": [f"One of: {names}."]})
    policy, _ = TeamPolicy.objects.select_for_update().get_or_create(team=team)
    now = now or timezone.now()
    audit = []
    for k, v in changes.items():
        old = getattr(policy, k)
        if old != v:
            audit.append(
                QuotaChange(
                    team=team,
                    field=k,
                    old_value=_audit_text(k, old),
                    new_value=_audit_text(k, v),
                    changed_by_id=by.pk,
                    changed_at=now,
                )
            )
            setattr(policy, k, v)
    policy.save()
    QuotaChange.objects.bulk_create(audit)
    return policy


@dataclass(frozen=True)
class QuotaEdit:
    """One cell of the quota grid as an admin staged it: the values typed, and the ones the
    page showed when it loaded (``was_*``), so a cell someone else changed meanwhile is not
    silently overwritten."""

    team: Team
    model: GpuModel
    nominal: Any
    borrowing_limit: Any
    was_nominal: Any = None
    was_borrowing_limit: Any = None


def quota_edit_key(edit: QuotaEdit) -> str:
    """How a staged cell is named in errors: ``vision/a100-80gb``."""
    return f"{edit.team.slug}/{edit.model.key}"


def quota_set_batch(
    *, edits: list[QuotaEdit], by: AnyUser, now: dt.datetime | None = None
) -> list[Quota]:
    """Save several staged quota cells at once: all or nothing, in one transaction, each
    changed field audited as its own entry (all with the same time, so the audit list reads
    as one batch). Every cell is checked before anything is written; the errors of all cells
    come back together, keyed ``team/model field``, and nothing is stored."""
    now = now or timezone.now()
    problems: dict[str, list[str]] = {}
    for edit in edits:
        for name, value, nullable in (
            ("nominal", edit.nominal, False),
            ("borrowing_limit", edit.borrowing_limit, True),
        ):
            try:
                _validate_limit(name, value, nullable=nullable)
            except ApplicationError as exc:
                problems[f"{quota_edit_key(edit)} {name}"] = exc.fields.get(name, [exc.message])
    if problems:
        raise ApplicationError("Nothing was saved: some values are not valid.", fields=problems)
    with transaction.atomic():
        current = {
            (q.team_id, q.gpu_model_id): q
            for q in Quota.objects.select_for_update().filter(
                team__in=[e.team for e in edits], gpu_model__in=[e.model for e in edits]
            )
        }
        for edit in edits:
            q = current.get((edit.team.pk, edit.model.pk))
            now_nominal = q.nominal if q else 0
            now_borrowing = q.borrowing_limit if q else None
            for name, was, there in (
                ("nominal", edit.was_nominal, now_nominal),
                ("borrowing_limit", edit.was_borrowing_limit, now_borrowing),
            ):
                if was is None:
                    continue  # the caller did not say what it saw
                seen = _validate_limit(name, was, nullable=True)
                if seen != there:
                    shown = "none" if there is None else there
                    problems[f"{quota_edit_key(edit)} {name}"] = [
                        f"Changed by someone else since this page loaded (now {shown})."
                    ]
        if problems:
            raise ApplicationError(
                "Nothing was saved: someone else changed these cells meanwhile.", fields=problems
            )
        return [
            quota_set(
                team=edit.team,
                model=edit.model,
                nominal=edit.nominal,
                borrowing_limit=edit.borrowing_limit,
                lending_limit=current[(edit.team.pk, edit.model.pk)].lending_limit
                if (edit.team.pk, edit.model.pk) in current
                else None,
                by=by,
                now=now,
            )
            for edit in edits
        ]


def _audit_text(field: str, value: Any) -> str:
    """A policy value as the audit trail shows it (a priority by its name)."""
    if field == "max_priority" and value in Priority.values:
        return str(Priority(value).label)
    return "" if value is None else str(value)[:40]


def gpus_in_use(*, team: Team, model: GpuModel) -> int:
    """GPUs of ``model`` the team's jobs hold now (admitted, submitted, running, stopping)."""
    total = Job.objects.filter(team=team, gpu_model=model, state__in=HOLDING_STATES).aggregate(
        gpus=Sum(F("replicas") * F("gpus_per_replica"))
    )["gpus"]
    return int(total or 0)


def quota_lowering_warning(*, team: Team, model: GpuModel, nominal: int, in_use: int) -> str:
    """What lowering a team's nominal below the GPUs it uses means, in words ("" when it is
    not below). Nothing stops at once: the surplus becomes borrowed quota (the newest jobs
    first), which another team within its nominal may then reclaim by preemption."""
    if nominal >= in_use:
        return ""
    surplus = in_use - nominal
    if model.is_shared:  # a shared pool's quota counts GiB (issue 32)
        used, held = f"{in_use} GiB of {model.key}", f"{surplus} GiB"
    else:
        used = f"{in_use} {model.key} GPU{'s' if in_use != 1 else ''}"
        held = f"{surplus} GPU{'s' if surplus != 1 else ''}"
    return (
        f"{team.slug} uses {used} now, "
        f"{surplus} more than the new nominal of {nominal}. Nothing stops at once: its newest "
        f"jobs holding those {held} then run on borrowed "
        "quota, and a team within its own nominal may preempt them (they are requeued, not "
        "failed)."
    )


@dataclass(frozen=True)
class GridCell:
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None
    in_use: int
    pending_demand: int

    @property
    def borrowed(self) -> int:
        return max(0, self.in_use - self.nominal)


@dataclass(frozen=True)
class QuotaGrid:
    teams: list[Team]
    models: list[GpuModel]
    cells: dict[tuple[int, int], GridCell]
    capacity: dict[int, int]
    nominal_total: dict[int, int]

    def overcommitted(self) -> list[GpuModel]:
        """Models whose nominal quotas add up to more than the pool has (a warning, not an
        error: admins may plan for capacity that is on its way)."""
        return [
            m for m in self.models if self.nominal_total.get(m.pk, 0) > self.capacity.get(m.pk, 0)
        ]


def quota_grid(*, teams: list[Team] | None = None) -> QuotaGrid:
    """Team × model: nominal, limits, GPUs in use, GPUs of queued jobs (five queries)."""
    teams = teams if teams is not None else list(Team.objects.all())
    team_ids = [t.pk for t in teams]
    models = list(GpuModel.objects.filter(active=True))
    quotas = {(q.team_id, q.gpu_model_id): q for q in Quota.objects.filter(team_id__in=team_ids)}
    in_use = {
        (r["team_id"], r["gpu_model_id"]): r["gpus"]
        for r in Job.objects.filter(
            state__in=HOLDING_STATES, team_id__in=team_ids, gpu_model__isnull=False
        )
        .values("team_id", "gpu_model_id")
        .annotate(gpus=Sum(F("replicas") * F("gpus_per_replica")))
    }
    demand: dict[tuple[int, int], int] = defaultdict(int)
    keys = {m.key: m.pk for m in models}
    for team_id, model_keys, gpus in Job.objects.filter(
        state=JobState.QUEUED, team_id__in=team_ids
    ).values_list("team_id", "gpu_models", F("replicas") * F("gpus_per_replica")):
        # Demand is shown on the job's first-choice model when it named one, else "any".
        first = next((keys[k] for k in (model_keys or []) if k in keys), None)
        if first is not None:
            demand[(team_id, first)] += gpus
        else:
            demand[(team_id, 0)] += gpus
    allocatable: dict[int, list[int]] = defaultdict(list)
    for model_id, gpus in Node.objects.filter(gpu_model__isnull=False).values_list(
        "gpu_model_id", "gpu_allocatable"
    ):
        allocatable[model_id].append(gpus)
    capacity = {model_id: pool_capacity(rows) for model_id, rows in allocatable.items()}
    cells = {}
    nominal_total: dict[int, int] = defaultdict(int)
    for t in teams:
        for m in models:
            q = quotas.get((t.pk, m.pk))
            cells[(t.pk, m.pk)] = GridCell(
                nominal=q.nominal if q else 0,
                borrowing_limit=q.borrowing_limit if q else None,
                lending_limit=q.lending_limit if q else None,
                in_use=in_use.get((t.pk, m.pk), 0),
                pending_demand=demand.get((t.pk, m.pk), 0),
            )
            nominal_total[m.pk] += q.nominal if q else 0
    return QuotaGrid(teams, models, cells, capacity, dict(nominal_total))


# A queued job the cycle found no closest model for, or has not looked at yet (no wait row).
NO_CLOSEST_MODEL = Q(wait__model="") | Q(wait__isnull=True)

# The queue's orders, by the ``sort`` parameter: the line the scheduler keeps (its last cycle's
# positions; jobs it has not ranked yet follow in priority and submit order), the longest
# waiting first, the shortest waiting first. A job waits since it last entered QUEUED (its
# submission, or its requeue after a preemption): ``state_changed_at`` while it is QUEUED.
QUEUE_SORTS: dict[str, tuple[Any, ...]] = {
    "position": (F("wait__order_key").asc(nulls_last=True), "-priority", "submitted_at", "id"),
    "waiting": ("state_changed_at", "id"),
    "-waiting": ("-state_changed_at", "-id"),
}


def queue_ordered(*, jobs: Any, sort: str = "position", model: str = "") -> Any:
    """Queued jobs (a queryset, for a page of it) in the order ``sort`` names (see
    ``QUEUE_SORTS``; unknown: the line), those that wait for ``model`` only when one is named:
    the model the cycle found closest, or before a cycle the first the user named."""
    order = QUEUE_SORTS.get(sort, QUEUE_SORTS["position"])
    queued = jobs.filter(state=JobState.QUEUED)
    if model:
        queued = queued.filter(Q(wait__model=model) | (NO_CLOSEST_MODEL & Q(gpu_models__0=model)))
    return queued.select_related("team", "owner", "wait__notes").order_by(*order)


def queue_pending(*, jobs: Any, limit: int = 500, sort: str = "position") -> list[Job]:
    """The first ``limit`` queued jobs in the order ``sort`` names, their positions counted."""
    pending = list(queue_ordered(jobs=jobs, sort=sort)[:limit])
    queue_positions_fill(pending)
    return pending


def queue_models(*, jobs: Any) -> list[str]:
    """The models queued jobs wait for (the queue's model filter): the closest candidate the
    cycle stored, or before a cycle the first model the user named."""
    queued = jobs.filter(state=JobState.QUEUED)
    stored = queued.exclude(NO_CLOSEST_MODEL).values_list("wait__model", flat=True)
    named = (
        queued.filter(NO_CLOSEST_MODEL)
        .annotate(first=KeyTextTransform("0", "gpu_models"))
        .exclude(first=None)
        .values_list("first", flat=True)
    )
    return sorted(set(stored.distinct()) | set(named.distinct()))


def hidden_ahead(jobs: Sequence[Job], visible: list[int]) -> dict[int, int]:
    """For each ranked job of ``jobs`` (by pk), how many jobs ahead of it the viewer cannot see.

    ``visible``: the order keys of every queued job the viewer may see (their teams' jobs). A
    job at position p has p - 1 queued jobs ahead; those not among ``visible`` belong to other
    teams.
    """
    keys = sorted(visible)
    out: dict[int, int] = {}
    for job in jobs:
        position, key = job.queue_position, job.queue_order_key
        if position is None or key is None:
            continue
        out[job.pk] = max(0, position - 1 - bisect_left(keys, key))
    return out


def visible_order_keys(visible: Any) -> list[int]:
    """The order keys of the queued jobs among ``visible`` (a job queryset)."""
    return list(
        visible.filter(state=JobState.QUEUED, wait__order_key__isnull=False).values_list(
            "wait__order_key", flat=True
        )
    )


def queue_oldest_by_team(*, limit: int = 200) -> list[Job]:
    """Each team's longest-waiting queued job, longest first (platform admins' cross-team view
    of who waits longest)."""
    queued = Job.objects.filter(state=JobState.QUEUED).select_related(
        "team", "owner", "wait__notes"
    )
    if db.on_postgresql():
        firsts = list(
            queued.order_by("team_id", "state_changed_at", "id").distinct("team_id")[:limit]
        )
    else:  # SQLite (the demo): DISTINCT ON is PostgreSQL's
        seen: dict[int, Job] = {}
        for job in queued.order_by("state_changed_at", "id"):
            seen.setdefault(job.team_id, job)
        firsts = list(seen.values())[:limit]
    queue_positions_fill(firsts)
    return sorted(firsts, key=lambda j: (j.state_changed_at, j.pk))


def queue_counts(*, jobs: Any) -> dict[str, int]:
    return dict(
        jobs.filter(state=JobState.QUEUED)
        .values("team__slug")
        .annotate(n=Count("id"))
        .values_list("team__slug", "n")
    )
