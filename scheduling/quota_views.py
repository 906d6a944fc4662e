"""The quota grid page: the team × model grid, its live check and what-if preview, the
cohort-quota and team-policy forms."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from portal.access import (
    teams_visible_to,
)
from portal.errors import ApplicationError
from portal.models import Team
from scheduling.models import DEFAULT_COHORT_SLUG, Cohort, GpuModel, QuotaChange, TeamPolicy
from scheduling.preview import (
    KEEP,
    CohortQuotaProposal,
    Proposal,
    QuotaProposal,
    TeamProposal,
    preview_changes,
)
from scheduling.services import (
    QuotaEdit,
    QuotaGrid,
    cohort_quota_set,
    cohort_quotas,
    pool_cohort,
    quota_edit_key,
    quota_grid,
    quota_lowering_warning,
    quota_set_batch,
    team_policy_set,
)


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
