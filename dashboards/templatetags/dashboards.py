"""Template helpers of the dashboards: number formats with units, and two inclusion tags that
let pages other apps own show dashboard figures (the queue page's wait times, the job page's
GPU utilization) without their views knowing about dashboards."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any

from django import template
from django.conf import settings
from django.utils.safestring import SafeString

from dashboards.live import LiveState
from dashboards.selectors.cluster import job_utilization_for
from dashboards.selectors.fairshare import Standing
from dashboards.selectors.queue import queue_stats
from dashboards.selectors.scope import team_scope

register = template.Library()


@register.filter
def duration(seconds: float | None) -> str:
    """``42 s``, ``3.5 min``, ``2.1 h``, ``1.5 d``: a wait in the unit that reads best."""
    if seconds is None or seconds == "":
        return "—"
    s = float(seconds)
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.1f} min"
    if s < 36 * 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


@register.filter
def percent(value: float | None, digits: int = 1) -> str:
    """A share (0-1) as ``12.5 %``."""
    if value is None or value == "":
        return "—"
    return f"{100 * float(value):.{int(digits)}f} %"


@register.filter
def bar_units(value: float | None) -> str:
    """A share (0-1) as SVG user units of a 100-wide bar, clamped, always with a dot."""
    v = max(0.0, min(1.0, float(value or 0)))
    return f"{100 * v:.2f}"


@register.filter
def epoch_utc(seconds: int | None) -> str:
    """Epoch seconds as ``2025-03-04 10:30``, the tables' 24-hour UTC format."""
    if seconds is None or seconds == "":
        return "—"
    return dt.datetime.fromtimestamp(int(seconds), tz=dt.UTC).strftime("%Y-%m-%d %H:%M")


@register.filter
def get_item(mapping: dict[Any, Any], key: Any) -> Any:
    return mapping.get(key, "")


@register.filter
def hours(value: float | None) -> str:
    if value is None or value == "":
        return "—"
    v = float(value)
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}" if v >= 10 else f"{v:,.2f}"


def _weight(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _fair_share_row(s: Standing) -> str:
    """One row as HTML. Only names and keys come from users, and each is escaped; the rest
    are numbers this module formats."""
    f = s.figures
    fair = s.fair_level
    alloc, usage = bar_units(f.allocation_share), bar_units(s.usage_part)
    mark = (
        f'<line class="share-fair" x1="{bar_units(fair)}" x2="{bar_units(fair)}" y1="0" y2="10"/>'
        if fair is not None
        else ""
    )
    dominant, allocation, past = (
        percent(f.dominant_share),
        percent(f.allocation_share),
        percent(s.usage_part),
    )
    label = f"dominant share {dominant}: {allocation} now, {past} past usage" + (
        f"; fair level {percent(fair)}" if fair is not None else ""
    )
    model = f" ({escape(f.dominant_model)})" if f.dominant_model else ""
    quotas = "<br>".join(
        f'<span class="nowrap">{escape(key)}: {nominal} / {allocated}</span>'
        for key, nominal, allocated in s.quotas
    )
    mine = ' class="mine"' if s.own else ""
    tag = ' <span class="mine-tag">yours</span>' if s.own else ""
    plural = "" if f.borrowed == 1 else "s"
    return (
        f'<tr data-team="{escape(s.team.slug)}"{mine}><th scope="row"><svg class="swatch" '
        'width="12" height="12" viewBox="0 0 12 12" aria-hidden="true" focusable="false">'
        f'<rect width="12" height="12" rx="2" fill="{s.colour}"/></svg>{escape(s.label)}{tag}'
        f"</th><td>{_weight(f.weight)}</td>"
        '<td class="share-cell"><svg class="share-bar" viewBox="0 0 100 10" '
        f'preserveAspectRatio="none" role="img" aria-label="{label}"><rect class="share-now" '
        f'x="0" y="0" height="10" width="{alloc}"/><rect class="share-usage" x="{alloc}" y="0" '
        f'height="10" width="{usage}"/>{mark}</svg><small data-figure="dominant">{dominant} = '
        f"{allocation} now{model} + {past} past usage · fair level {percent(fair)}</small></td>"
        f'<td data-figure="standing">{escape(s.status)}</td><td>{percent(f.share)}</td>'
        f"<td>{quotas or 'none'}</td><td>{f.borrowed} GPU{plural}</td>"
        f"<td>{hours(f.gpu_hours)} h</td><td>{hours(f.weighted_gpu_hours_decayed)} h</td></tr>"
    )


@register.simple_tag
def fair_share_rows(standings: list[Standing]) -> SafeString:
    """The fair-share table's rows. Built here rather than in the template: a row has some
    thirty figures, and at 200 teams the template engine and its escaping took ~100 ms."""
    return SafeString("\n".join(_fair_share_row(s) for s in standings))


@register.inclusion_tag("dashboards/_queue_stats.html", takes_context=True)
def queue_wait_stats(context: dict[str, Any]) -> dict[str, Any]:
    """Per model: what waits now and the p50/p90/p99 wait of jobs that started recently."""
    request = context["request"]
    live = LiveState()
    scope = team_scope(user=request.user)
    models, _teams = queue_stats(scope=scope, live=live, by_team=False)
    return {"models": models, "window_hours": settings.GPUPOOL_WAIT_WINDOW_HOURS}


@register.inclusion_tag("dashboards/_job_utilization.html")
def job_gpu_utilization(job: Any) -> dict[str, Any]:
    """The job page's GPU utilization card (nothing when the cluster has no Prometheus)."""
    reading, status = job_utilization_for(job=job)
    return {"job": job, "reading": reading, "status": status}
