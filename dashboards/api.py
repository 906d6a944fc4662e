"""REST for the dashboards: the pool now and over time, a team's usage, queue statistics and
fair-share standings. Thin views over ``dashboards.selectors``; the output serializers only
document and shape what the selectors return.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.http import Http404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboards.estimates import estimate_calibration
from dashboards.live import LiveState
from dashboards.selectors.fairshare import fair_share_standings
from dashboards.selectors.pool import pool_history, pool_overview
from dashboards.selectors.queue import WaitStats, queue_stats
from dashboards.selectors.scope import team_scope
from dashboards.selectors.times import parse_duration, parse_instant
from dashboards.selectors.usage import usage_rows
from portal.access import teams_visible_to
from portal.api.query import query_params
from portal.errors import ApplicationError


class _PoolFigures(serializers.Serializer):
    gpus_total = serializers.IntegerField(help_text="Capacity the nodes report")
    gpus_allocatable = serializers.IntegerField()
    gpus_allocated = serializers.IntegerField(help_text="Held by portal jobs")
    gpus_used_by_others = serializers.IntegerField(
        help_text="Held by pods the portal did not create"
    )
    gpus_free = serializers.IntegerField(help_text="Free on ready, schedulable nodes")
    gpus_unavailable = serializers.IntegerField(help_text="Idle on NotReady or cordoned nodes")
    gpus_fragmented = serializers.IntegerField(
        help_text="Free GPUs on partly used nodes (not usable by a whole-node replica)"
    )
    largest_free_block = serializers.IntegerField(help_text="Most free GPUs on one node")
    nodes_total = serializers.IntegerField()
    nodes_not_ready = serializers.IntegerField()
    nodes_cordoned = serializers.IntegerField()


class PoolCellSerializer(_PoolFigures):
    cluster = serializers.CharField()
    model = serializers.CharField()


class PoolModelSerializer(serializers.Serializer):
    model = serializers.CharField()
    display_name = serializers.CharField()
    gpus_allocatable = serializers.IntegerField()
    gpus_allocated = serializers.IntegerField()
    gpus_used_by_others = serializers.IntegerField()
    gpus_free = serializers.IntegerField()
    gpus_unavailable = serializers.IntegerField()
    largest_free_block = serializers.IntegerField()
    pending_gpus = serializers.IntegerField(
        help_text="GPUs asked for by queued jobs waiting for this model (their closest "
        "candidate, the model they named, or their first choice before a cycle)"
    )
    queued_jobs = serializers.IntegerField()
    clusters = serializers.ListField(child=serializers.CharField())


class PoolSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    cells = PoolCellSerializer(many=True, help_text="One per (cluster, GPU model)")
    models = PoolModelSerializer(many=True)
    queued_jobs = serializers.IntegerField()
    pending_gpus = serializers.IntegerField()
    unplaceable_jobs = serializers.IntegerField(help_text="Queued jobs no catalog model can serve")
    last_snapshot_at = serializers.DateTimeField(allow_null=True)


class PoolView(APIView):
    """The pool now, per cluster × GPU model, and per model over all clusters."""

    @extend_schema(responses=PoolSerializer)
    def get(self, request: Request) -> Response:
        live = LiveState()
        overview = pool_overview(live=live)
        names = overview.cluster_names
        cells = [
            {
                "cluster": names[c.cluster_id],
                "model": live.models[c.gpu_model_id].key,
                **c.figures(),
            }
            for c in sorted(
                live.cells.values(),
                key=lambda c: (names[c.cluster_id], live.models[c.gpu_model_id].key),
            )
        ]
        models = [
            {
                "model": s.model.key,
                "display_name": s.model.display_name,
                "gpus_allocatable": s.gpus_allocatable,
                "gpus_allocated": s.gpus_allocated,
                "gpus_used_by_others": s.gpus_used_by_others,
                "gpus_free": s.gpus_free,
                "gpus_unavailable": s.gpus_unavailable,
                "largest_free_block": s.largest_free_block,
                "pending_gpus": s.pending_gpus,
                "queued_jobs": s.queued_jobs,
                "clusters": [names[c.cluster_id] for c in s.cells],
            }
            for s in overview.summaries
        ]
        body = {
            "at": overview.now,
            "cells": cells,
            "models": models,
            "queued_jobs": overview.totals["queued_jobs"],
            "pending_gpus": overview.totals["pending_gpus"],
            "unplaceable_jobs": overview.unplaceable_jobs,
            "last_snapshot_at": overview.last_snapshot,
        }
        return Response(PoolSerializer(body).data)


class PoolPointSerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="Start of the step")
    gpus_total = serializers.FloatField()
    gpus_allocatable = serializers.FloatField()
    gpus_allocated = serializers.FloatField()
    gpus_used_by_others = serializers.FloatField()
    gpus_free = serializers.FloatField()
    gpus_unavailable = serializers.FloatField()
    gpus_fragmented = serializers.FloatField()
    largest_free_block = serializers.FloatField(help_text="Highest within the step")
    nodes_total = serializers.FloatField()
    nodes_not_ready = serializers.FloatField()
    nodes_cordoned = serializers.FloatField()


class PoolHistorySerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    step = serializers.IntegerField(help_text="Seconds per point (may be widened)")
    resolution = serializers.ChoiceField(choices=["minute", "hour"])
    points = PoolPointSerializer(many=True)


def _ids_of(raw: Any, known: dict[str, int], field: str, what: str) -> list[int] | None:
    """Ids of the comma-separated names in ``raw`` (None when absent); unknown names are a 400
    naming the query parameter."""
    names = _names(raw)
    if not names:
        return None
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ApplicationError(
            f"Unknown {what}.", fields={field: [f"Unknown: {', '.join(unknown)}"]}
        )
    return [known[n] for n in names]


def _names(raw: str | None) -> list[str]:
    return [n for n in (raw or "").split(",") if n]


class PoolHistoryQuery(serializers.Serializer):
    model = serializers.CharField(required=False, help_text="GPU model keys, comma-separated")
    cluster = serializers.CharField(required=False, help_text="Cluster names, comma-separated")
    since = serializers.CharField(
        required=False, help_text="ISO 8601 time or a duration ago (24h, 7d); default 24h"
    )
    until = serializers.CharField(required=False, help_text="ISO 8601 time; default now")
    step = serializers.CharField(
        required=False, help_text="Seconds or a duration (1m, 10m, 1h); default by range"
    )


class PoolHistoryView(APIView):
    """The pool over time, summed over the chosen clusters and models, averaged per step."""

    @extend_schema(parameters=[PoolHistoryQuery], responses=PoolHistorySerializer)
    def get(self, request: Request) -> Response:
        live = LiveState()
        params = query_params(PoolHistoryQuery, request)
        since = parse_instant(params.get("since") or "24h", name="since", now=live.now)
        until = (
            parse_instant(params["until"], name="until", now=live.now)
            if params.get("until")
            else live.now
        )
        step = (
            int(parse_duration(params["step"], name="step").total_seconds())
            if params.get("step")
            else None
        )
        model_ids = _ids_of(
            params.get("model"), {m.key: m.id for m in live.models.values()}, "model", "GPU model"
        )
        cluster_ids = _ids_of(
            params.get("cluster"),
            {c.name: c.id for c in live.clusters.values()},
            "cluster",
            "cluster",
        )
        history = pool_history(
            since=since,
            until=until,
            step=step,
            cluster_ids=cluster_ids,
            model_ids=model_ids,
            now=live.now,
        )
        return Response(PoolHistorySerializer(history).data)


class UsageRowSerializer(serializers.Serializer):
    period = serializers.DateField(help_text="First day of the day or month (UTC)")
    model = serializers.CharField()
    user = serializers.CharField(allow_null=True)
    gpu_hours = serializers.FloatField()
    weighted_gpu_hours = serializers.FloatField(help_text="GPU-hours × the model's cost factor")
    cost = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)


class TeamUsageSerializer(serializers.Serializer):
    team = serializers.CharField()
    period = serializers.ChoiceField(choices=["day", "month"])
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    currency = serializers.CharField()
    rows = UsageRowSerializer(many=True)


class TeamUsageQuery(serializers.Serializer):
    period = serializers.ChoiceField(choices=["day", "month"], default="day")
    since = serializers.CharField(
        required=False, help_text="ISO 8601 or a duration ago; default 30d"
    )
    until = serializers.CharField(required=False, help_text="ISO 8601; default now")


class TeamUsageView(APIView):
    """A team's GPU-hours and cost per day or month, per model and user (members only)."""

    @extend_schema(parameters=[TeamUsageQuery], responses=TeamUsageSerializer)
    def get(self, request: Request, slug: str) -> Response:
        team = teams_visible_to(request.user).filter(slug=slug).first()
        if team is None:
            raise Http404
        params = query_params(TeamUsageQuery, request)
        now = dt.datetime.now(tz=dt.UTC)
        period = params["period"]
        since = parse_instant(params.get("since") or "30d", name="since", now=now)
        until = (
            parse_instant(params["until"], name="until", now=now) if params.get("until") else now
        )
        rows = usage_rows(period=period, since=since, until=until, team_ids=[team.pk], by_user=True)
        body = {
            "team": team.slug,
            "period": period,
            "since": since,
            "until": until,
            "currency": settings.GPUPOOL_COST_CURRENCY,
            "rows": [r.__dict__ for r in rows],
        }
        return Response(TeamUsageSerializer(body).data)


class WaitSerializer(serializers.Serializer):
    started = serializers.IntegerField(help_text="Jobs that started running in the window")
    p50 = serializers.FloatField(help_text="Seconds")
    p90 = serializers.FloatField(help_text="Seconds")
    p99 = serializers.FloatField(help_text="Seconds")


class ModelQueueSerializer(serializers.Serializer):
    model = serializers.CharField(help_text="First-choice model; 'none' when no model fits")
    queued_jobs = serializers.IntegerField()
    pending_gpus = serializers.IntegerField()
    wait = WaitSerializer(allow_null=True)


class TeamQueueSerializer(ModelQueueSerializer):
    team = serializers.CharField()


class QueueStatsSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    window_hours = serializers.FloatField()
    models = ModelQueueSerializer(many=True)
    teams = TeamQueueSerializer(many=True)


def _wait(w: WaitStats | None) -> dict[str, Any] | None:
    if w is None:
        return None
    return {"started": w.started, "p50": w.p50, "p90": w.p90, "p99": w.p99}


class QueueStatsQuery(serializers.Serializer):
    window = serializers.CharField(required=False, help_text="Duration, e.g. 24h or 7d; default 7d")


class QueueStatsView(APIView):
    """What waits now per model (the one each job waits for), and how long jobs waited
    (QUEUED → RUNNING)."""

    @extend_schema(parameters=[QueueStatsQuery], responses=QueueStatsSerializer)
    def get(self, request: Request) -> Response:
        live = LiveState()
        params = query_params(QueueStatsQuery, request)
        window = (
            parse_duration(params["window"], name="window")
            if params.get("window")
            else dt.timedelta(hours=settings.GPUPOOL_WAIT_WINDOW_HOURS)
        )
        scope = team_scope(user=request.user)
        models, teams = queue_stats(scope=scope, live=live, window=window)
        body = {
            "at": live.now,
            "window_hours": window.total_seconds() / 3600,
            "models": [
                {
                    "model": m.key,
                    "queued_jobs": m.queued_jobs,
                    "pending_gpus": m.pending_gpus,
                    "wait": _wait(m.waits),
                }
                for m in models
            ],
            "teams": [
                {
                    "team": t.team.slug,
                    "model": t.model.key if t.model else "none",
                    "queued_jobs": t.queued_jobs,
                    "pending_gpus": t.pending_gpus,
                    "wait": _wait(t.waits),
                }
                for t in teams
            ],
        }
        return Response(QueueStatsSerializer(body).data)


class StandingSerializer(serializers.Serializer):
    team = serializers.CharField()
    weight = serializers.FloatField()
    target_share = serializers.FloatField(
        allow_null=True, help_text="weight / summed weights of teams with work; null: no work"
    )
    dominant_share = serializers.FloatField(
        help_text="allocation_share + usage weight × usage_share"
    )
    fair_level = serializers.FloatField(
        allow_null=True,
        help_text="The dominant share equal treatment would give the team now: the dominant "
        "shares of teams with work, added up and split by weight; null: no work",
    )
    allocation_share = serializers.FloatField(help_text="max over models of allocated / pool GPUs")
    dominant_model = serializers.CharField()
    usage_share = serializers.FloatField()
    weighted_share = serializers.FloatField(help_text="dominant_share / weight: the cycle's order")
    nominal_gpus = serializers.IntegerField()
    gpus_allocated = serializers.IntegerField()
    borrowed_gpus = serializers.IntegerField()
    gpu_hours = serializers.FloatField(help_text="Raw GPU-hours over the fair-share horizon")
    weighted_gpu_hours_decayed = serializers.FloatField()
    status = serializers.CharField(
        help_text="above / below / at fair level (the dominant share against it), or no work"
    )


class FairShareSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    teams = StandingSerializer(many=True)
    hidden_teams = serializers.IntegerField(help_text="Teams not shown by the deployment's setting")


class FairShareView(APIView):
    """Fair-share standings of every (visible) team, like Slurm's ``sshare``."""

    @extend_schema(responses=FairShareSerializer)
    def get(self, request: Request) -> Response:
        live = LiveState()
        standings, hidden = fair_share_standings(scope=team_scope(user=request.user), live=live)
        rows = []
        for s in standings:
            f = s.figures
            rows.append(
                {
                    "team": s.team.slug,
                    "weight": f.weight,
                    "target_share": f.target_share,
                    "dominant_share": f.dominant_share,
                    "fair_level": s.fair_level,
                    "allocation_share": f.allocation_share,
                    "dominant_model": f.dominant_model,
                    "usage_share": f.usage_share,
                    "weighted_share": f.share,
                    "nominal_gpus": f.nominal,
                    "gpus_allocated": f.gpus_allocated,
                    "borrowed_gpus": f.borrowed,
                    "gpu_hours": f.gpu_hours,
                    "weighted_gpu_hours_decayed": f.weighted_gpu_hours_decayed,
                    "status": s.status,
                }
            )
        body = {"at": live.now, "teams": rows, "hidden_teams": hidden}
        return Response(FairShareSerializer(body).data)


class CalibrationRowSerializer(serializers.Serializer):
    bucket = serializers.CharField(
        help_text='Actual wait: "under 10 min", "10 min to 1 h", "1 to 6 h", "over 6 h", or '
        '"every start" (the last row)'
    )
    starts = serializers.IntegerField(help_text="Jobs that started with a first estimate")
    median_error_seconds = serializers.FloatField(allow_null=True)
    p90_error_seconds = serializers.FloatField(allow_null=True)
    inside = serializers.FloatField(
        allow_null=True, help_text="Share of starts inside the first estimate's range"
    )
    early = serializers.IntegerField(help_text="Starts before the first estimate's point")


class EstimateCalibrationView(APIView):
    """Platform admins: each job's first start estimate against its actual start, for the
    jobs that started in the last 30 days, by bucket of actual wait (``/pool/estimates/``)."""

    permission_classes = [IsAdminUser]

    @extend_schema(responses=CalibrationRowSerializer(many=True))
    def get(self, request: Request) -> Response:
        rows = estimate_calibration(now=timezone.now())
        return Response(CalibrationRowSerializer([asdict(r) for r in rows], many=True).data)
