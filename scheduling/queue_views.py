"""The queue page: what waits, why, in which order, and for how long."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from portal import hooks
from portal.access import (
    jobs_visible_to,
    teams_visible_to,
)
from portal.jobs.blocker import Blocker, SimulatedStart, StartRange, blocker_of, stored_start
from portal.jobs.waits import queue_positions_fill
from portal.models import Job
from rules import engine
from rules.engine.reasons import fmt_wait
from scheduling.matching import REQUIREMENT_FIELDS, requirement_of
from scheduling.services import (
    QUEUE_SORTS,
    hidden_ahead,
    queue_models,
    queue_oldest_by_team,
    queue_ordered,
    visible_order_keys,
)
from scheduling.snapshot import engine_catalog


def _first_choices(jobs: list[Job]) -> dict[int, str]:
    """Each job's first-choice model under its policy (memoised per distinct requirement)."""
    catalog, _ = engine_catalog()
    memo: dict[tuple[Any, ...], str] = {}
    out = {}
    for j in jobs:
        row = {name: getattr(j, name) for name in REQUIREMENT_FIELDS}
        key = tuple(tuple(v) if isinstance(v, list) else v for v in row.values())
        if key not in memo:
            matched = engine.resolve_candidates(*requirement_of(row), catalog)
            memo[key] = matched.matched[0].key if matched.matched else "—"
        out[j.pk] = memo[key]
    return out


def _waits_for(jobs: list[Job]) -> dict[int, str]:
    """The model each job waits for: the closest candidate the last cycle found, else the first
    model the user named, else its first choice (before any cycle looked at it). The same rule
    as the wait statistics (``dashboards.live.LiveState.queued``)."""
    out = {j.pk: j.pending_model or (j.gpu_models[0] if j.gpu_models else "") for j in jobs}
    unknown = [j for j in jobs if not out[j.pk]]
    if unknown:
        out.update(_first_choices(unknown))
    return out


@dataclass(frozen=True)
class QueueRow:
    """One row of the queue page."""

    job: Job
    waits_for: str
    waited: str
    """Time since it entered the queue, e.g. "2h 5m"."""
    hidden_ahead: int | None
    """Jobs of other teams ahead of it, for a viewer who cannot see them (None: all visible)."""
    blocker: Blocker | None
    estimate: SimulatedStart | None = None
    """Its stored estimate with its likely range (None: not estimated by the simulation)."""


def _sort_links(request: HttpRequest, sort: str) -> dict[str, dict[str, str]]:
    """Per sortable column: the link that sorts by it, and its aria-sort state."""
    links = {}
    for column, (first, other) in {
        "position": ("position", "position"),
        "waiting": ("waiting", "-waiting"),
    }.items():
        query = request.GET.copy()
        query.pop("fragment", None)
        query.pop("page", None)  # a new order starts at its first page
        # A second click on the sorted column reverses it (waiting: longest, then shortest).
        query["sort"] = other if sort == first else first
        state = "none"
        if sort == "position" and column == "position":
            state = "ascending"
        elif sort == "waiting" and column == "waiting":
            state = "descending"
        elif sort == "-waiting" and column == "waiting":
            state = "ascending"
        links[column] = {"href": f"?{query.urlencode()}", "aria_sort": state}
    return links


# Rows per page of the queue: a line of thousands is read a page at a time (and a page of 100
# rows renders well within the pages' 150 ms budget; see bench/dashboard_bench.py).
QUEUE_PAGE_SIZE = 100


def _page_links(request: HttpRequest, page: Page[Job]) -> dict[str, str]:
    """The previous and next pages' links, keeping the sort and filters."""
    links = {}
    for name, has, number in (
        ("previous", page.has_previous, lambda: page.previous_page_number()),
        ("next", page.has_next, lambda: page.next_page_number()),
    ):
        if has():
            query = request.GET.copy()
            query.pop("fragment", None)
            query["page"] = str(number())
            links[name] = f"?{query.urlencode()}"
    return links


def _stored_estimate(
    job: Job, ranges: dict[int, StartRange], now: dt.datetime
) -> SimulatedStart | None:
    """A queued job's stored estimate with its recorded range, as the queue shows it."""
    if job.estimate_updated_at is None or job.estimated_start_at is None:
        return None
    return stored_start(job, ranges, now)


@login_required
def queue_page(request: HttpRequest) -> HttpResponse:
    """What waits, why, in which order, and for how long; the live part (``#queue-live``)
    refreshes itself every few seconds (``?fragment=live``)."""
    now = timezone.now()
    visible = jobs_visible_to(request.user)
    jobs = visible
    teams = list(teams_visible_to(request.user).distinct())
    team_slug = request.GET.get("team", "")
    if team_slug:
        jobs = jobs.filter(team__slug=team_slug)
    sort = request.GET.get("sort", "position")
    if sort not in QUEUE_SORTS:
        sort = "position"
    staff = request.user.is_staff
    # Platform admins' cross-team view: each team's longest-waiting job, instead of the line.
    view = "oldest" if staff and request.GET.get("view") == "oldest" else ""
    model = request.GET.get("model", "")
    page = (
        None
        if view
        else Paginator(queue_ordered(jobs=jobs, sort=sort, model=model), QUEUE_PAGE_SIZE).get_page(
            request.GET.get("page")
        )
    )
    shown = list(page.object_list) if page else []
    queue_positions_fill(shown)
    waits_for = _waits_for(shown)
    ahead: dict[int, int] = {}
    if not staff and shown:
        # Positions rank the whole queue; what the viewer cannot see is said in words.
        ahead = hidden_ahead(shown, visible_order_keys(visible))
    ranges = (hooks.estimate_ranges.ask([j.pk for j in shown]) or {}) if shown else {}
    rows = [
        QueueRow(
            job=j,
            waits_for=waits_for[j.pk],
            waited=fmt_wait(max(dt.timedelta(0), now - j.state_changed_at)),
            hidden_ahead=None if staff or j.queue_position is None else ahead.get(j.pk),
            blocker=blocker_of(j),
            estimate=_stored_estimate(j, ranges, now),
        )
        for j in shown
    ]
    oldest = (
        [
            QueueRow(
                job=j,
                waits_for=j.pending_model or "—",
                waited=fmt_wait(max(dt.timedelta(0), now - j.state_changed_at)),
                hidden_ahead=None,
                blocker=blocker_of(j),
            )
            for j in queue_oldest_by_team()
        ]
        if view
        else []
    )
    query = request.GET.copy()
    query["fragment"] = "live"
    context = {
        "rows": rows,
        "teams": teams,
        "team_slug": team_slug,
        "model": model,
        "models": queue_models(jobs=jobs),
        "page": page,
        "pages": _page_links(request, page) if page else {},
        "sort": sort,
        "sort_links": _sort_links(request, sort),
        "staff": staff,
        "view": view,
        "oldest": oldest,
        "live_url": f"?{query.urlencode()}",
        "now": now,
    }
    if request.GET.get("fragment") == "live":
        return render(request, "scheduling/_queue_live.html", context)
    return render(request, "scheduling/queue.html", context)
