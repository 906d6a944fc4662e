"""Template helpers of the dashboards: number formats with units, and two inclusion tags that
let pages other apps own show dashboard figures (the queue page's wait times, the job page's
GPU utilization) without their views knowing about dashboards."""

from __future__ import annotations

from typing import Any

from django import template
from django.conf import settings

from dashboards import selectors as sel
from dashboards.live import LiveState

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
def pct_width(value: float | None) -> str:
    """A share (0-1) as a CSS width, clamped to 0-100 %."""
    v = max(0.0, min(1.0, float(value or 0)))
    return f"{100 * v:.2f}%"


@register.filter
def ratio_width(part: float | None, whole: float | None) -> str:
    """``part / whole`` as a CSS width (0 % when there is no whole)."""
    if not whole:
        return "0%"
    return pct_width(float(part or 0) / float(whole))


@register.filter
def get_item(mapping: dict[Any, Any], key: Any) -> Any:
    return mapping.get(key, "")


@register.filter
def hours(value: float | None) -> str:
    if value is None or value == "":
        return "—"
    v = float(value)
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}" if v >= 10 else f"{v:,.2f}"


@register.inclusion_tag("dashboards/_queue_stats.html", takes_context=True)
def queue_wait_stats(context: dict[str, Any]) -> dict[str, Any]:
    """Per model: what waits now and the p50/p90/p99 wait of jobs that started recently."""
    request = context["request"]
    live = LiveState()
    scope = sel.team_scope(user=request.user)
    models, _teams = sel.queue_stats(scope=scope, live=live, by_team=False)
    return {"models": models, "window_hours": settings.GPUPOOL_WAIT_WINDOW_HOURS}


@register.inclusion_tag("dashboards/_job_utilization.html")
def job_gpu_utilization(job: Any) -> dict[str, Any]:
    """The job page's GPU utilization card (nothing when the cluster has no Prometheus)."""
    reading, status = sel.job_utilization_for(job=job)
    return {"job": job, "reading": reading, "status": status}
