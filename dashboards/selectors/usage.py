"""Usage and cost: GPU-hours per period, model and user."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from django.conf import settings
from django.db.models import (
    Sum,
)
from django.db.models.functions import TruncDay, TruncMonth

from scheduling.models import UsageRecord

Period = Literal["day", "month"]


@dataclass(frozen=True)
class UsageRow:
    period: dt.date
    model: str
    user: str | None
    gpu_hours: float
    weighted_gpu_hours: float
    cost: Decimal | None


def usage_rows(
    *,
    period: Period,
    since: dt.datetime,
    until: dt.datetime,
    team_ids: Iterable[int] | None = None,
    user_id: int | None = None,
    by_user: bool = False,
) -> list[UsageRow]:
    """GPU-hours per period and model (and user), from the usage ledger, with their cost.

    Cost is weighted GPU-hours × ``GPUPOOL_PRICE_PER_GPU_HOUR`` when that is set (an internal
    chargeback rate per A100-80GB-equivalent hour), else GPU-hours × the model's catalog price
    (unknown when the catalog has none).
    """
    rows = UsageRecord.objects.filter(hour__gte=since, hour__lt=until)
    if team_ids is not None:
        rows = rows.filter(team_id__in=list(team_ids))
    if user_id is not None:
        rows = rows.filter(user_id=user_id)
    trunc = TruncDay("hour") if period == "day" else TruncMonth("hour")
    keys = ["p", "gpu_model__key", "gpu_model__price_per_hour_usd"]
    if by_user:
        keys.append("user__username")
    grouped = (
        rows.annotate(p=trunc)
        .values(*keys)
        .annotate(h=Sum("gpu_hours"), w=Sum("weighted_gpu_hours"))
        .order_by("p", "gpu_model__key", *(["user__username"] if by_user else []))
    )
    rate = settings.GPUPOOL_PRICE_PER_GPU_HOUR
    out = []
    for r in grouped:
        h, w = float(r["h"] or 0.0), float(r["w"] or 0.0)
        if rate:
            cost: Decimal | None = Decimal(str(round(w * rate, 2)))
        elif r["gpu_model__price_per_hour_usd"] is not None:
            cost = (r["gpu_model__price_per_hour_usd"] * Decimal(str(h))).quantize(Decimal("0.01"))
        else:
            cost = None
        period_start = r["p"].date() if isinstance(r["p"], dt.datetime) else r["p"]
        user = (r.get("user__username") or "(deleted user)") if by_user else None
        out.append(UsageRow(period_start, r["gpu_model__key"], user, h, w, cost))
    return out


def usage_totals(rows: Iterable[UsageRow]) -> dict[str, Any]:
    rows = list(rows)
    costs = [r.cost for r in rows if r.cost is not None]
    return {
        "gpu_hours": sum(r.gpu_hours for r in rows),
        "weighted_gpu_hours": sum(r.weighted_gpu_hours for r in rows),
        "cost": sum(costs, Decimal("0")) if costs else None,
        "cost_complete": len(costs) == len(rows),
    }


@dataclass
class UsagePeriod:
    """One row of the usage table: a day or month, GPU-hours per model, and totals."""

    period: dt.date
    hours: list[float]
    """GPU-hours per model, in the order of the table's model columns."""
    gpu_hours: float
    weighted_gpu_hours: float
    cost: Decimal | None
    cost_complete: bool


def usage_pivot(rows: Sequence[UsageRow]) -> tuple[list[str], list[UsagePeriod]]:
    """Model columns (most GPU-hours first) and one row per period, newest first."""
    per_model: dict[str, float] = defaultdict(float)
    for r in rows:
        per_model[r.model] += r.gpu_hours
    columns = sorted(per_model, key=lambda m: (-per_model[m], m))
    index = {m: i for i, m in enumerate(columns)}
    grouped: dict[dt.date, list[UsageRow]] = defaultdict(list)
    for r in rows:
        grouped[r.period].append(r)
    out = []
    for period in sorted(grouped, reverse=True):
        group = grouped[period]
        hours = [0.0] * len(columns)
        for r in group:
            hours[index[r.model]] += r.gpu_hours
        totals = usage_totals(group)
        out.append(
            UsagePeriod(
                period,
                hours,
                totals["gpu_hours"],
                totals["weighted_gpu_hours"],
                totals["cost"],
                totals["cost_complete"],
            )
        )
    return columns, out


def usage_by_user(rows: Sequence[UsageRow]) -> list[UsageRow]:
    """Per-user rows summed over the whole range, per (user, model), most GPU-hours first."""
    grouped: dict[tuple[str, str], list[UsageRow]] = defaultdict(list)
    for r in rows:
        grouped[(r.user or "", r.model)].append(r)
    out = []
    for (user, model), group in grouped.items():
        totals = usage_totals(group)
        cost = totals["cost"] if totals["cost_complete"] else None
        out.append(
            UsageRow(
                group[0].period,
                model,
                user,
                totals["gpu_hours"],
                totals["weighted_gpu_hours"],
                cost,
            )
        )
    return sorted(out, key=lambda r: (-r.gpu_hours, r.user or "", r.model))


@dataclass
class UserTotal:
    """One user's GPU time in a team over the whole range, all models together."""

    user: str
    gpu_hours: float
    weighted_gpu_hours: float
    cost: Decimal | None
    """None when some of their models have no price (the cost would be a part only)."""
    share: float
    """Their part of the team's weighted GPU-hours, 0 … 1."""


def usage_user_totals(rows: Sequence[UsageRow]) -> list[UserTotal]:
    """Per user, summed over models and periods, most weighted GPU-hours first: who used the
    team's quota, in one line each."""
    grouped: dict[str, list[UsageRow]] = defaultdict(list)
    for r in rows:
        grouped[r.user or ""].append(r)
    whole = sum(r.weighted_gpu_hours for r in rows) or 1.0
    out = []
    for user, group in grouped.items():
        totals = usage_totals(group)
        out.append(
            UserTotal(
                user=user,
                gpu_hours=totals["gpu_hours"],
                weighted_gpu_hours=totals["weighted_gpu_hours"],
                cost=totals["cost"] if totals["cost_complete"] else None,
                share=totals["weighted_gpu_hours"] / whole,
            )
        )
    return sorted(out, key=lambda t: (-t.weighted_gpu_hours, t.user))
