"""Dashboard pages, their htmx fragments, the usage CSV and ``/metrics``.

Each view parses its query, calls selectors and renders; a fragment request (``request.htmx``
with ``?fragment=``) gets the named partial only, so the overview refreshes its cards every
``GPUPOOL_DASHBOARD_REFRESH_SECONDS`` and switches chart ranges without a full reload.
"""

from __future__ import annotations

import csv
import datetime as dt
import hmac
import ipaddress
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseForbidden,
    StreamingHttpResponse,
)
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboards import chart_window, charts
from dashboards.estimates import estimate_calibration
from dashboards.live import LiveState
from dashboards.live_types import ModelInfo
from dashboards.metrics import metrics_exposition
from dashboards.selectors.cluster import cluster_heatmap, idle_allocations
from dashboards.selectors.fairshare import fair_share_standings
from dashboards.selectors.pool import pool_overview
from dashboards.selectors.scope import TeamScope, team_scope
from dashboards.selectors.usage import (
    UsageRow,
    usage_by_user,
    usage_pivot,
    usage_rows,
    usage_totals,
    usage_user_totals,
)
from portal.access import teams_visible_to
from portal.jobs.blocker import CONFIDENCE
from portal.models import Team
from portal.proxies import client_address
from rules.engine.reasons import fmt_wait
from scheduling.services import cohort_quotas


def _model_param(request: HttpRequest, live: LiveState) -> ModelInfo | None:
    key = request.GET.get("model", "")
    return next((m for m in live.models.values() if m.key == key), None) if key else None


def _chart_context(request: HttpRequest, live: LiveState, scope: TeamScope) -> dict[str, Any]:
    range_key = chart_window.chart_range(request.GET.get("range")).key
    model = _model_param(request, live)
    return {
        "chart": charts.team_allocation_chart(
            scope=scope, live=live, range_key=range_key, model=model
        ),
        "ranges": chart_window.RANGES.values(),
        "range_key": range_key,
        "chart_model": model,
    }


@login_required
@require_GET
def pool_overview_page(request: HttpRequest) -> HttpResponse:
    """The home page: a card per GPU model, totals, and GPUs allocated over time by team."""
    live = LiveState()
    scope = team_scope(user=request.user)
    fragment = request.GET.get("fragment", "") if request.htmx else ""
    context: dict[str, Any] = {"refresh_seconds": settings.GPUPOOL_DASHBOARD_REFRESH_SECONDS}
    if fragment != "chart":
        context["overview"] = pool_overview(live=live)
    if fragment != "live":
        context.update(_chart_context(request, live, scope))
    template = {
        "live": "dashboards/_pool_live.html",
        "chart": "dashboards/_pool_chart.html",
    }.get(fragment, "dashboards/pool.html")
    return render(request, template, context)


@login_required
@require_GET
def estimate_calibration_page(request: HttpRequest) -> HttpResponse:
    """Platform admins: how the start estimates came out. Each job's first estimate after
    its submit against its actual start, by how long it waited: the median and P90 error and
    the share of starts inside the range shown."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Only platform admins see the estimates' calibration.")
    days = 30
    rows = estimate_calibration(now=timezone.now(), days=days)

    def words(seconds: float | None) -> str:
        return "—" if seconds is None else fmt_wait(dt.timedelta(seconds=round(seconds)))

    context = {
        "rows": [
            {
                "bucket": r.bucket,
                "starts": r.starts,
                "median": words(r.median_error_seconds),
                "p90": words(r.p90_error_seconds),
                "inside": "—" if r.inside is None else f"{r.inside:.0%}",
                "early": r.early,
            }
            for r in rows
        ],
        "any": rows[-1].starts > 0,
        "days": days,
        "confidence": round(CONFIDENCE * 100),
    }
    return render(request, "dashboards/estimates.html", context)


@login_required
@require_GET
def cluster_page(request: HttpRequest) -> HttpResponse:
    """Per cluster, nodes grouped by model as a heat map; for admins, idle allocations."""
    live = LiveState()
    context = {
        "clusters": cluster_heatmap(live=live),
        "idle": idle_allocations() if request.user.is_staff else None,
    }
    return render(request, "dashboards/clusters.html", context)


@login_required
@require_GET
def fair_share_page(request: HttpRequest) -> HttpResponse:
    """Weight, quota, borrowed, GPU-hours and dominant vs target share per team; history."""
    live = LiveState()
    scope = team_scope(user=request.user)
    standings, hidden = fair_share_standings(scope=scope, live=live)
    range_key = chart_window.chart_range(request.GET.get("range"), default="7d").key
    chart = charts.share_history_chart(scope=scope, live=live, range_key=range_key)
    context = {
        "standings": standings,
        "hidden": hidden,
        "chart": chart,
        "ranges": chart_window.RANGES.values(),
        "range_key": range_key,
        "half_life_hours": settings.GPUPOOL_USAGE_HALF_LIFE_HOURS,
        "horizon_days": round(8 * settings.GPUPOOL_USAGE_HALF_LIFE_HOURS / 24),
        "cohort_quotas": cohort_quotas(),
    }
    if request.htmx and request.GET.get("fragment") == "chart":
        return render(request, "dashboards/_share_chart.html", context)
    return render(request, "dashboards/fair_share.html", context)


# ---------------------------------------------------------------------------------------------
# My usage
# ---------------------------------------------------------------------------------------------
PERIOD_SPAN = {"day": dt.timedelta(days=30), "month": dt.timedelta(days=366)}


def _usage_query(request: HttpRequest) -> dict[str, Any]:
    """Whose usage (``scope``: ``me`` or a team slug the caller belongs to) and per what."""
    period = "month" if request.GET.get("period") == "month" else "day"
    teams = list(teams_visible_to(request.user).distinct().order_by("name"))
    slug = request.GET.get("scope", "me")
    team: Team | None = None
    if slug != "me":
        team = next((t for t in teams if t.slug == slug), None)
        if team is None:
            raise Http404("No such team among yours.")
    now = dt.datetime.now(tz=dt.UTC)
    until = now + dt.timedelta(hours=1)  # the ledger's current hour is stamped at its start
    since = until - PERIOD_SPAN[period]
    if period == "month":
        since = since.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    else:
        since = since.replace(hour=0, minute=0, second=0, microsecond=0)
    rows = usage_rows(
        period=period,
        since=since,
        until=until,
        team_ids=[team.pk] if team else None,
        user_id=None if team else request.user.pk,
        by_user=team is not None,
    )
    return {
        "period": period,
        "teams": teams,
        "team": team,
        "scope": slug,
        "rows": rows,
        "since": since,
        "now": now,
    }


def _by_model(rows: list[UsageRow]) -> list[UsageRow]:
    """Per-user rows of a team folded into per-model rows for the table and the chart."""
    folded: dict[tuple[dt.date, str], list[UsageRow]] = {}
    for r in rows:
        folded.setdefault((r.period, r.model), []).append(r)
    out = []
    for (period, model), group in folded.items():
        costs = [g.cost for g in group]
        out.append(
            UsageRow(
                period,
                model,
                None,
                sum(g.gpu_hours for g in group),
                sum(g.weighted_gpu_hours for g in group),
                None if any(c is None for c in costs) else sum(costs),  # type: ignore[arg-type]
            )
        )
    return out


@login_required
@require_GET
def usage_page(request: HttpRequest) -> HttpResponse:
    """GPU-hours and cost per day or month, for me or one of my teams (then also per user)."""
    q = _usage_query(request)
    per_model = _by_model(q["rows"]) if q["team"] else q["rows"]
    label = "last 30 days" if q["period"] == "day" else "last 12 months"
    columns, periods = usage_pivot(per_model)
    context = {
        **q,
        "per_model": per_model,
        "columns": columns,
        "periods": periods,
        "per_user": usage_by_user(q["rows"]) if q["team"] else [],
        "user_totals": usage_user_totals(q["rows"]) if q["team"] else [],
        "totals": usage_totals(per_model),
        "chart": charts.usage_chart(
            per_model, period=q["period"], rng_label=label, since=q["since"], until=q["now"]
        ),
        "range_label": label,
        "currency": settings.GPUPOOL_COST_CURRENCY,
        "chargeback": bool(settings.GPUPOOL_PRICE_PER_GPU_HOUR),
        "price": settings.GPUPOOL_PRICE_PER_GPU_HOUR,
    }
    return render(request, "dashboards/usage.html", context)


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_cell(value: object) -> str:
    """A CSV cell a spreadsheet will not run as a formula (OWASP CSV injection)."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


@login_required
@require_GET
def usage_csv(request: HttpRequest) -> StreamingHttpResponse:
    q = _usage_query(request)
    currency = settings.GPUPOOL_COST_CURRENCY
    header = [
        q["period"],
        "team" if q["team"] else "user",
        "user",
        "model",
        "gpu_hours",
        "weighted_gpu_hours",
        f"cost_{currency.lower()}",
    ]
    who = q["team"].slug if q["team"] else request.user.get_username()
    writer = csv.writer(_Echo())

    def lines() -> Any:
        yield writer.writerow(header)
        for r in q["rows"]:
            yield writer.writerow(
                [
                    r.period.isoformat(),
                    csv_cell(who),
                    csv_cell(r.user or request.user.get_username()),
                    csv_cell(r.model),
                    f"{r.gpu_hours:.4f}",
                    f"{r.weighted_gpu_hours:.4f}",
                    "" if r.cost is None else f"{r.cost:.2f}",
                ]
            )

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    filename = f"gpupool-usage-{q['scope']}-{q['period']}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


# ---------------------------------------------------------------------------------------------
# /metrics
# ---------------------------------------------------------------------------------------------
def _allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [
        ipaddress.ip_network(n.strip(), strict=False)
        for n in settings.GPUPOOL_METRICS_ALLOWED_NETWORKS
        if n.strip()
    ]


NO_METRICS_TOKEN = (
    "Forbidden: /metrics needs GPUPOOL_METRICS_TOKEN to be set (or, explicitly, "
    "GPUPOOL_METRICS_REQUIRE_TOKEN=false).\n"
)


def metrics_allowed(request: HttpRequest) -> tuple[bool, int, str]:
    """(allowed, status, text if not): the caller's address must be in an allowed network
    (403), and the request must carry the token (401); with no token configured, nobody is
    let in (403) unless ``GPUPOOL_METRICS_REQUIRE_TOKEN`` is off.

    The address is the peer's, or, from a trusted reverse proxy, the client it forwards for
    (``portal.proxies``). A proxy on the same host makes every peer 127.0.0.1, which is why
    the network alone is not enough by default.
    """
    try:
        caller = ipaddress.ip_address(client_address(request))
    except ValueError:
        return False, 403, "Forbidden.\n"
    if not any(caller in net for net in _allowed_networks()):
        return False, 403, "Forbidden.\n"
    token = settings.GPUPOOL_METRICS_TOKEN
    if not token:
        if settings.GPUPOOL_METRICS_REQUIRE_TOKEN:
            return False, 403, NO_METRICS_TOKEN
        return True, 200, ""
    given = request.headers.get("Authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return False, 401, "Unauthorized: send Authorization: Bearer <GPUPOOL_METRICS_TOKEN>.\n"
    return True, 200, ""


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    allowed, status, text = metrics_allowed(request)
    if not allowed:
        response = HttpResponse(text, status=status, content_type="text/plain")
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(
        metrics_exposition(), content_type="text/plain; version=0.0.4; charset=utf-8"
    )
