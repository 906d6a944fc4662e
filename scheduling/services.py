"""Quota and policy writers (audited) and the read models of the queue and the quota grid."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Count, F, Sum
from django.utils import timezone

from portal.errors import ApplicationError
from portal.models import Job, JobState, Team
from scheduling.cycle import HOLDING_STATES
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


def _validate_limit(name: str, value: Any, *, nullable: bool) -> int | None:
    if value is None or value == "":
        if nullable:
            return None
        raise ApplicationError(f"{name} is required.", fields={name: ["This field is required."]})
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value))
        except ValueError:
            raise ApplicationError(
                f"{name} must be a whole number.", fields={name: ["Must be a whole number."]}
            ) from None
    if value < 0:
        raise ApplicationError(f"{name} cannot be negative.", fields={name: ["Must be 0 or more."]})
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
    QuotaChange.objects.bulk_create(
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


@transaction.atomic
def team_policy_set(
    *, team: Team, by: AnyUser, now: dt.datetime | None = None, **changes: Any
) -> TeamPolicy:
    """Change a team's weight, cohort, hold or queue limit; audited like quotas."""
    allowed = {"weight", "cohort", "held", "held_reason", "max_queued_jobs"}
    unknown = set(changes) - allowed
    if unknown:
        raise ApplicationError(f"Unknown policy field(s): {sorted(unknown)}")
    if "weight" in changes and (
        not isinstance(changes["weight"], int | float) or changes["weight"] <= 0
    ):
        raise ApplicationError("weight must be positive.", fields={"weight": ["Must be > 0."]})
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
                    old_value=str(old)[:40],
                    new_value=str(v)[:40],
                    changed_by_id=by.pk,
                    changed_at=now,
                )
            )
            setattr(policy, k, v)
    policy.save()
    QuotaChange.objects.bulk_create(audit)
    return policy


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
    return (
        f"{team.slug} uses {in_use} {model.key} GPU{'s' if in_use != 1 else ''} now, "
        f"{surplus} more than the new nominal of {nominal}. Nothing stops at once: its newest "
        f"jobs holding those {surplus} GPU{'s' if surplus != 1 else ''} then run on borrowed "
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
    from clusters.models import Node

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
    capacity = dict(
        Node.objects.filter(gpu_model__isnull=False)
        .values("gpu_model_id")
        .annotate(n=Sum("gpu_allocatable"))
        .values_list("gpu_model_id", "n")
    )
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


def queue_pending(*, jobs: Any, limit: int = 500) -> list[Job]:
    """Queued jobs in the order the scheduler will consider them (its last cycle's positions;
    jobs it has not ranked yet follow in priority and submit order)."""
    return list(
        jobs.filter(state=JobState.QUEUED)
        .select_related("team", "owner")
        .order_by(F("queue_position").asc(nulls_last=True), "-priority", "submitted_at", "id")[
            :limit
        ]
    )


def queue_counts(*, jobs: Any) -> dict[str, int]:
    return dict(
        jobs.filter(state=JobState.QUEUED)
        .values("team__slug")
        .annotate(n=Count("id"))
        .values_list("team__slug", "n")
    )
