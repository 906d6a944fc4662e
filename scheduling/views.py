"""Pages: the queue (what waits, why, in which order) and the quota grid."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Page, Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal import hooks
from portal.access import (
    SUBMIT_ROLES,
    job_get_for_user,
    jobs_visible_to,
    team_for_submit,
    team_roles_of,
    teams_visible_to,
)
from portal.errors import ApplicationError, NotFound
from portal.jobs.blocker import Blocker, SimulatedStart, StartRange, blocker_of, stored_start
from portal.jobs.services import submit_limits
from portal.jobs.spec import SpecError, parse_job_spec
from portal.jobs.waits import queue_positions_fill
from portal.models import Job, Team
from portal.web.forms import JobSubmitForm
from rules import engine
from rules.engine.reasons import fmt_wait
from rules.jobspec import CONSTRAINT_FIELDS
from scheduling.catalog import catalog_entries
from scheduling.estimates import job_estimate, spec_estimate
from scheduling.matching import REQUIREMENT_FIELDS, requirement_of, requirement_preview
from scheduling.models import DEFAULT_COHORT_SLUG, Cohort, GpuModel, QuotaChange, TeamPolicy
from scheduling.preview import (
    KEEP,
    CohortQuotaProposal,
    Proposal,
    QuotaProposal,
    TeamProposal,
    preview_changes,
)
from scheduling.quota_check import beyond_quota_message
from scheduling.services import (
    QUEUE_SORTS,
    QuotaEdit,
    QuotaGrid,
    cohort_quota_set,
    cohort_quotas,
    hidden_ahead,
    pool_cohort,
    queue_models,
    queue_oldest_by_team,
    queue_ordered,
    quota_edit_key,
    quota_grid,
    quota_lowering_warning,
    quota_set_batch,
    team_policy_set,
    visible_order_keys,
)
from scheduling.snapshot import engine_catalog, pool_now


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


@dataclass
class _Staged:
    """The grid as the admin typed it: every cell's values (typed or as loaded), the cells
    that differ from what the page showed, and what is wrong or worth a warning."""

    typed: dict[tuple[int, int], tuple[str, str]] = field(default_factory=dict)
    edits: list[QuotaEdit] = field(default_factory=list)
    errors: dict[str, list[str]] = field(default_factory=dict)
    lowering: list[str] = field(default_factory=list)
    totals: dict[int, int] = field(default_factory=dict)


def _limit_text(value: int | None) -> str:
    return "" if value is None else str(value)


def _quota_staged(request: HttpRequest, grid: QuotaGrid, models: list[GpuModel]) -> _Staged:
    """Read the grid's fields (``n:team:model``, ``b:team:model`` and the ``was-`` values the
    page loaded with) into staged edits, checked as the batch save will check them."""
    staged = _Staged()
    post = request.POST
    staged.totals = dict(grid.nominal_total)
    for team in grid.teams:
        for model in models:
            name = f"{team.slug}:{model.key}"
            cell = grid.cells[(team.pk, model.pk)]
            if f"n:{name}" not in post:
                continue
            nominal, borrowing = post.get(f"n:{name}", "").strip(), post.get(f"b:{name}", "")
            borrowing = borrowing.strip()
            was_n = post.get(f"was-n:{name}", str(cell.nominal))
            was_b = post.get(f"was-b:{name}", _limit_text(cell.borrowing_limit))
            staged.typed[(team.pk, model.pk)] = (nominal, borrowing)
            if (nominal, borrowing) == (was_n, was_b):
                continue
            edit = QuotaEdit(team, model, nominal, borrowing, was_n, was_b)
            staged.edits.append(edit)
            key = quota_edit_key(edit)
            for label, value, required in (
                ("nominal", nominal, True),
                ("borrowing limit", borrowing, False),
            ):
                if value == "" and not required:
                    continue
                if not value.isascii() or not value.isdigit():
                    staged.errors[f"{key} {label}"] = ["Must be a whole number, 0 or more."]
            if nominal.isascii() and nominal.isdigit():
                staged.totals[model.pk] = (
                    staged.totals.get(model.pk, 0) + int(nominal) - cell.nominal
                )
                warning = quota_lowering_warning(
                    team=team, model=model, nominal=int(nominal), in_use=cell.in_use
                )
                if warning and int(nominal) < cell.nominal:
                    staged.lowering.append(warning)
    return staged


def _grid_models(grid: QuotaGrid, show_all: bool) -> tuple[list[GpuModel], int]:
    """The models the grid shows: those the pool has hardware of, or some team has quota,
    GPUs or queued demand on, first and alone unless the viewer asked for all; and how many
    are left out."""
    used = {
        m.pk
        for m in grid.models
        if grid.capacity.get(m.pk)
        or grid.nominal_total.get(m.pk)
        or any(
            grid.cells[(t.pk, m.pk)].in_use or grid.cells[(t.pk, m.pk)].pending_demand
            for t in grid.teams
        )
    }
    # The model that matters to the viewer first: the most GPUs their teams (every team, for
    # a platform admin) hold as quota, use or wait for; the catalog's order breaks ties, and
    # models with only hardware follow.
    weight = {
        m.pk: sum(
            c.nominal + c.in_use + c.pending_demand
            for c in (grid.cells[(t.pk, m.pk)] for t in grid.teams)
        )
        for m in grid.models
    }
    shown = sorted((m for m in grid.models if m.pk in used), key=lambda m: -weight[m.pk])
    if show_all:
        return shown + [m for m in grid.models if m.pk not in used], 0
    return shown, len(grid.models) - len(used)


@login_required
def quota_page(request: HttpRequest) -> HttpResponse:
    """The team × model grid. Platform admins type into any number of cells, see the totals
    against capacity as they type (``quota_check``), and save them in one audited batch;
    everyone else sees their teams' rows read-only."""
    if request.method == "POST" and not request.user.is_staff:
        return HttpResponseForbidden("Only platform admins change quotas.")
    if request.user.is_staff:
        teams = list(Team.objects.all())
    else:
        teams = list(teams_visible_to(request.user).distinct())
    grid = quota_grid(teams=teams)
    show_all = request.GET.get("models") == "all"
    models, hidden = _grid_models(grid, show_all)
    staged = _Staged(totals=dict(grid.nominal_total))
    status = 200
    if request.method == "POST":
        staged = _quota_staged(request, grid, grid.models)  # a shown or a hidden column
        if not staged.edits:
            messages.info(request, "Nothing to save: no cell was changed.")
            return redirect(request.get_full_path())
        if not staged.errors and (not staged.lowering or request.POST.get("confirm") == "1"):
            try:
                quota_set_batch(edits=staged.edits, by=request.user)
            except ApplicationError as exc:
                staged.errors = exc.fields or {"": [exc.message]}
            else:
                n = len(staged.edits)
                messages.success(request, f"Saved {n} quota cell{'s' if n != 1 else ''}.")
                return redirect(request.get_full_path())
        status = 400 if staged.errors else 200
    return render(
        request,
        "scheduling/quotas.html",
        _quota_context(request, grid, models, hidden, staged),
        status=status,
    )


def _quota_context(
    request: HttpRequest,
    grid: QuotaGrid,
    models: list[GpuModel],
    hidden: int,
    staged: _Staged,
) -> dict[str, Any]:
    editable = request.user.is_staff
    rows = []
    for t in grid.teams:
        cells = []
        for m in models:
            cell = grid.cells[(t.pk, m.pk)]
            typed = staged.typed.get(
                (t.pk, m.pk), (str(cell.nominal), _limit_text(cell.borrowing_limit))
            )
            key = f"{t.slug}/{m.key}"
            bad = [
                msg for k, msgs in staged.errors.items() if k.startswith(key + " ") for msg in msgs
            ]
            cells.append({"model": m, "cell": cell, "typed": typed, "errors": bad})
        rows.append((t, cells))
    changes = QuotaChange.objects.select_related("team", "cohort", "gpu_model", "changed_by")
    if not editable:
        changes = changes.filter(team__in=grid.teams)
    cohorts = list(Cohort.objects.all())
    if not any(c.slug == DEFAULT_COHORT_SLUG for c in cohorts):
        cohorts.insert(0, Cohort(name="Default (the pool)", slug=DEFAULT_COHORT_SLUG))
    return {
        "grid": grid,
        "models": models,
        "hidden_models": hidden,
        "show_all": request.GET.get("models") == "all",
        "rows": rows,
        "columns": _column_totals(grid, models, staged),
        "staged": staged,
        "overcommitted": grid.overcommitted(),
        "editable": editable,
        "history": changes[:50],
        "cohort_quotas": cohort_quotas(),
        "team_policies": team_policy_rows(grid.teams) if editable else [],
        "cohorts": cohorts,
        "default_cohort": DEFAULT_COHORT_SLUG,
    }


def _column_totals(
    grid: QuotaGrid, models: list[GpuModel], staged: _Staged
) -> list[dict[str, Any]]:
    """Per model: the nominal quotas as typed, added up, against the pool's capacity."""
    out = []
    for m in models:
        total = staged.totals.get(m.pk, 0)
        capacity = grid.capacity.get(m.pk, 0)
        out.append(
            {
                "model": m,
                "total": total,
                "capacity": capacity,
                "over": max(0, total - capacity),
                "changed": total != grid.nominal_total.get(m.pk, 0),
            }
        )
    return out


@login_required
@require_POST
def quota_check(request: HttpRequest) -> HttpResponse:
    """As the admin types (htmx, every few hundred ms): the staged changes in words, what is
    wrong with them, and each column's nominal total against capacity, swapped in place.
    Nothing is saved."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Only platform admins change quotas.")
    grid = quota_grid(teams=list(Team.objects.all()))
    models, _ = _grid_models(grid, request.GET.get("models") == "all")
    staged = _quota_staged(request, grid, grid.models)
    return render(
        request,
        "scheduling/_quota_check.html",
        {"staged": staged, "columns": _column_totals(grid, models, staged), "oob": True},
    )


@login_required
@require_POST
def cohort_quota_save(request: HttpRequest) -> HttpResponse:
    """Platform admins set the GPUs of a model a cohort owns (``default``: the pool's)."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Only platform admins change quotas.")
    slug = request.POST.get("cohort", "")
    cohort = pool_cohort() if slug == DEFAULT_COHORT_SLUG else get_object_or_404(Cohort, slug=slug)
    model = get_object_or_404(GpuModel, key=request.POST.get("gpu_model", ""))
    try:
        cohort_quota_set(
            cohort=cohort, model=model, nominal=request.POST.get("nominal", ""), by=request.user
        )
    except ApplicationError as exc:
        error = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.fields.items()) or exc.message
        messages.error(request, f"cohort {cohort.slug} / {model.key}: {error}")
    else:
        messages.success(request, f"Cohort {cohort.name} owns {model.key} quota as saved.")
    return redirect("quotas")


@login_required
def match_preview(request: HttpRequest) -> HttpResponse:
    """The submit form's live preview, next to the requirement: the models it matches that the
    pool has, in the order they are tried, which is first and which are full now."""
    params = request.GET.copy()
    if params.get("requirement") == "models":
        for name in CONSTRAINT_FIELDS:
            params.pop(name, None)
    else:
        params.pop("gpu_models", None)
        params.pop("gpu_models_order", None)
    # The form sends the checkbox only when it is ticked.
    allow_fallback = "allow_fallback" in params if "requirement" in params else True
    try:
        preview = requirement_preview(params, allow_fallback=allow_fallback)
        error = None
    except SpecError as exc:
        preview, error = None, "; ".join(" ".join(v) for v in exc.fields.values())
    quota = _quota_warning(request, params.get("team") or "", preview)
    return render(
        request, "scheduling/_match.html", {"preview": preview, "error": error, "quota": quota}
    )


def _quota_warning(request: HttpRequest, slug: str, preview: dict[str, Any] | None) -> str | None:
    """What the submit would refuse for the team chosen on the form (one of the caller's), in
    its own words, before the user fills in the rest."""
    if preview is None or not slug:
        return None
    team = Team.objects.filter(slug=slug, memberships__user=request.user).first()
    if team is None:
        return None
    matched = preview["matched"]
    gang = preview["gang"]
    return beyond_quota_message(
        team,
        matched if preview["allow_fallback"] else matched[:1],
        replicas=gang["replicas"],
        per_replica=gang["gpus_per_replica"],
        shared=preview["shared"],
    )


# ---------------------------------------------------------------------------------------------
# What-if before saving (scheduling.preview)
# ---------------------------------------------------------------------------------------------
def _grid_proposal(staged: _Staged) -> list[QuotaProposal]:
    """The grid's staged cells as the batch save would store them (lending limits kept)."""
    return [
        QuotaProposal(
            team=e.team.slug,
            model=e.model.key,
            nominal=int(e.nominal),
            borrowing_limit=int(e.borrowing_limit) if e.borrowing_limit != "" else None,
        )
        for e in staged.edits
    ]


def _cohort_proposal(post: Any, errors: dict[str, list[str]]) -> list[CohortQuotaProposal]:
    """The cohort-quota form (``cohort``, ``gpu_model``, ``nominal``), when it is the one sent."""
    if "cohort" not in post or "gpu_model" not in post:
        return []
    slug, key, nominal = post["cohort"], post["gpu_model"], post.get("nominal", "").strip()
    if slug != DEFAULT_COHORT_SLUG and not Cohort.objects.filter(slug=slug).exists():
        errors["cohort"] = [f"No cohort {slug!r}."]
    if not GpuModel.objects.filter(key=key, active=True).exists():
        errors["gpu_model"] = [f"No active GPU model {key!r}."]
    if not nominal.isascii() or not nominal.isdigit():
        errors["nominal"] = ["Must be a whole number, 0 or more."]
    if errors:
        return []
    return [CohortQuotaProposal(cohort=slug, model=key, nominal=int(nominal))]


def _team_edits(post: Any, teams: list[Team]) -> tuple[list[TeamProposal], dict[str, list[str]]]:
    """The team-policy form's weights (``w:<team>``) and cohorts (``c:<team>``) that differ
    from what the page loaded (``was-w:``/``was-c:``), checked as the save checks them."""
    cohorts = {c.slug for c in Cohort.objects.all()} | {DEFAULT_COHORT_SLUG}
    edits: list[TeamProposal] = []
    errors: dict[str, list[str]] = {}
    for team in teams:
        weight_in, cohort_in = post.get(f"w:{team.slug}"), post.get(f"c:{team.slug}")
        if weight_in is None and cohort_in is None:
            continue
        weight: Any = KEEP
        cohort: Any = KEEP
        if weight_in is not None and weight_in.strip() != post.get(f"was-w:{team.slug}", ""):
            try:
                weight = float(weight_in)
            except ValueError:
                weight = -1.0
            if not 0.01 <= weight <= 1e6:
                errors[f"{team.slug} weight"] = ["Must be a number from 0.01 to 1000000."]
        if cohort_in is not None and cohort_in != post.get(f"was-c:{team.slug}", ""):
            if cohort_in not in cohorts:
                errors[f"{team.slug} cohort"] = [f"No cohort {cohort_in!r}."]
            cohort = cohort_in
        if weight is not KEEP or cohort is not KEEP:
            edits.append(TeamProposal(team=team.slug, weight=weight, cohort=cohort))
    return edits, errors


@login_required
@require_POST
def quota_preview(request: HttpRequest) -> HttpResponse:
    """Platform admins, before saving (htmx): what the next cycle would do with the changes
    typed into the quota grid, the cohort-quota form or the team-policy form, decided by the
    real engine on the pool as it is now. Nothing is saved."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Only platform admins change quotas.")
    teams = list(Team.objects.all())
    grid = quota_grid(teams=teams)
    staged = _quota_staged(request, grid, grid.models)
    errors = dict(staged.errors)
    cohort_quotas_in = _cohort_proposal(request.POST, errors)
    team_edits, team_errors = _team_edits(request.POST, teams)
    errors.update(team_errors)
    preview = None
    if not errors:
        proposal = Proposal(
            quotas=tuple(_grid_proposal(staged)),
            teams=tuple(team_edits),
            cohort_quotas=tuple(cohort_quotas_in),
        )
        preview = preview_changes(proposal)
    return render(
        request,
        "scheduling/_preview.html",
        {"preview": preview, "errors": errors},
        # htmx swaps only a 2xx: the fragment carries the errors to the page; a plain POST
        # gets the 400 that bad input is.
        status=400 if errors and not getattr(request, "htmx", False) else 200,
    )


def team_policy_rows(teams: list[Team]) -> list[dict[str, Any]]:
    """Each team's weight and cohort as the scheduler uses them (defaults without a policy)."""
    policies = {p.team_id: p for p in TeamPolicy.objects.select_related("cohort")}
    rows = []
    for t in teams:
        p = policies.get(t.pk)
        rows.append(
            {
                "team": t,
                "weight": f"{p.weight:g}" if p else "1",
                "cohort": p.cohort.slug if p and p.cohort else DEFAULT_COHORT_SLUG,
            }
        )
    return rows


@login_required
@require_POST
def team_policies_save(request: HttpRequest) -> HttpResponse:
    """Platform admins save the team-policy form: each changed weight and cohort, audited."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Only platform admins change team policies.")
    teams = list(Team.objects.all())
    edits, errors = _team_edits(request.POST, teams)
    if errors:
        for k, msgs in errors.items():
            messages.error(request, f"{k}: {' '.join(msgs)}")
        return redirect("quotas")
    by_slug = {t.slug: t for t in teams}
    for e in edits:
        changes: dict[str, Any] = {}
        if e.weight is not KEEP:
            changes["weight"] = e.weight
        if e.cohort is not KEEP:
            changes["cohort"] = (
                None if e.cohort == DEFAULT_COHORT_SLUG else Cohort.objects.get(slug=e.cohort)
            )
        team_policy_set(team=by_slug[e.team], by=request.user, **changes)
    n = len(edits)
    messages.success(request, f"Saved {n} team polic{'ies' if n != 1 else 'y'}.")
    return redirect("quotas")


@login_required
def job_estimate_alternatives(request: HttpRequest, job_id: str) -> HttpResponse:
    """A queued job's estimate and its alternatives (per model, fewer replicas), computed on
    demand: a fragment the job page loads when asked (each alternative is a simulation)."""
    try:
        job = job_get_for_user(request.user, job_id)
    except NotFound as exc:
        raise Http404("Job not found.") from exc
    snapshot, config = pool_now()
    answer = job_estimate(job, snapshot=snapshot, config=config)
    return render(request, "scheduling/_estimate.html", {"answer": answer})


def _form_for_estimate(request: HttpRequest) -> JobSubmitForm:
    """The submit form as typed so far; a name and image are not needed for an estimate, so
    stand-ins fill them while they are empty."""
    params = request.GET.copy()
    for name, stand_in in (("name", "estimate"), ("image", "example/image:latest")):
        if not params.get(name):
            params[name] = stand_in
    roles = team_roles_of(request.user)
    teams = [t for t in Team.objects.filter(pk__in=roles) if roles[t.pk] in SUBMIT_ROLES]
    catalog = list(GpuModel.objects.filter(active=True).values_list("key", "display_name"))
    return JobSubmitForm(params, teams=teams, models=catalog, limits=submit_limits())


@login_required
def estimate_preview(request: HttpRequest) -> HttpResponse:
    """The submit form's start estimate, next to the model preview: when the job would start
    if submitted now, and per alternative; or what to fix before there can be one."""
    form = _form_for_estimate(request)
    answer, problem = None, ""
    if not form.is_valid():
        problem = "; ".join(f"{f}: {' '.join(e)}" for f, e in form.errors.items())
    else:
        try:
            spec = parse_job_spec(
                form.to_spec_data(), catalog=catalog_entries(), limits=submit_limits()
            )
            team = team_for_submit(request.user, spec.team)
        except SpecError as exc:
            problem = "; ".join(f"{f}: {' '.join(e)}" for f, e in exc.fields.items())
        except NotFound:
            problem = "you cannot submit to that team"
        else:
            snapshot, config = pool_now()
            answer = spec_estimate(spec=spec, team=team, snapshot=snapshot, config=config)
    return render(
        request, "scheduling/_estimate.html", {"answer": answer, "problem": problem, "spec": True}
    )
