"""Pages: the queue (what waits, why, in which order) and the quota grid."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from portal.access import jobs_visible_to, teams_visible_to
from portal.errors import ApplicationError
from portal.jobs.spec import SpecError
from portal.models import Job, Team
from scheduling import engine
from scheduling.cycle import engine_catalog
from scheduling.matching import requirement_preview
from scheduling.models import DEFAULT_COHORT_SLUG, Cohort, GpuModel, QuotaChange
from scheduling.services import (
    cohort_quota_set,
    cohort_quotas,
    pool_cohort,
    queue_pending,
    quota_grid,
    quota_lowering_warning,
    quota_set,
)


def _first_choices(jobs: list[Job]) -> dict[int, str]:
    """Each job's first-choice model under its policy (memoised per distinct requirement)."""
    catalog, _ = engine_catalog()
    memo: dict[tuple[Any, ...], str] = {}
    out = {}
    for j in jobs:
        key = (
            tuple(j.gpu_models),
            j.min_gpu_memory_gib,
            j.min_fp16_tflops,
            j.requires_bf16,
            j.requires_fp8,
            j.selection_policy,
        )
        if key not in memo:
            req = engine.Requirement(
                models=tuple(j.gpu_models),
                min_memory_gib=float(j.min_gpu_memory_gib or 0),
                min_tflops_fp16=float(j.min_fp16_tflops or 0),
                bf16=j.requires_bf16,
                fp8=j.requires_fp8,
            )
            matched = engine.resolve_candidates(req, engine.Policy(j.selection_policy), catalog)
            memo[key] = matched.matched[0].key if matched.matched else "—"
        out[j.pk] = memo[key]
    return out


@login_required
def queue_page(request: HttpRequest) -> HttpResponse:
    jobs = jobs_visible_to(request.user)
    teams = list(teams_visible_to(request.user).distinct())
    team_slug = request.GET.get("team", "")
    if team_slug:
        jobs = jobs.filter(team__slug=team_slug)
    pending = queue_pending(jobs=jobs)
    first = _first_choices(pending)
    model = request.GET.get("model", "")
    rows = [(j, first[j.pk]) for j in pending if not model or first[j.pk] == model]
    context = {
        "rows": rows,
        "teams": teams,
        "team_slug": team_slug,
        "model": model,
        "models": sorted({m for m in first.values() if m != "—"}),
    }
    return render(request, "scheduling/queue.html", context)


@login_required
def quota_page(request: HttpRequest) -> HttpResponse:
    """Platform admins edit the grid; everyone else sees their teams' rows read-only."""
    if request.user.is_staff:
        teams = list(Team.objects.all())
    else:
        teams = list(teams_visible_to(request.user).distinct())
    grid = quota_grid(teams=teams)
    rows = [(t, [(m, grid.cells[(t.pk, m.pk)]) for m in grid.models]) for t in grid.teams]
    changes = QuotaChange.objects.select_related("team", "cohort", "gpu_model", "changed_by")
    if not request.user.is_staff:
        changes = changes.filter(team__in=teams)
    cohorts = list(Cohort.objects.all())
    if not any(c.slug == DEFAULT_COHORT_SLUG for c in cohorts):
        cohorts.insert(0, Cohort(name="Default (the pool)", slug=DEFAULT_COHORT_SLUG))
    return render(
        request,
        "scheduling/quotas.html",
        {
            "grid": grid,
            "rows": rows,
            "overcommitted": grid.overcommitted(),
            "editable": request.user.is_staff,
            "history": changes[:50],
            "cohort_quotas": cohort_quotas(),
            "cohorts": cohorts,
            "default_cohort": DEFAULT_COHORT_SLUG,
        },
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
@require_POST
def quota_cell_save(request: HttpRequest, team: str, model: str) -> HttpResponse:
    if not request.user.is_staff:
        return HttpResponseForbidden("Only platform admins change quotas.")
    team_obj = get_object_or_404(Team, slug=team)
    model_obj = get_object_or_404(GpuModel, key=model)
    error = None
    warning = _lowering_unconfirmed(request, team_obj, model_obj)
    if warning:
        return _quota_cell_warn(request, team_obj, model_obj, warning)
    try:
        quota_set(
            team=team_obj,
            model=model_obj,
            nominal=request.POST.get("nominal", ""),
            borrowing_limit=request.POST.get("borrowing_limit", ""),
            by=request.user,
        )
    except ApplicationError as exc:
        error = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.fields.items()) or exc.message
    if request.htmx:
        cell = quota_grid(teams=[team_obj]).cells.get((team_obj.pk, model_obj.pk))
        if cell is None:
            raise Http404
        return render(
            request,
            "scheduling/_quota_cell.html",
            {
                "team": team_obj,
                "model": model_obj,
                "cell": cell,
                "editable": True,
                "error": error,
                "saved": error is None,
            },
            status=400 if error else 200,
        )
    if error:
        messages.error(request, f"{team_obj.slug} / {model_obj.key}: {error}")
    else:
        messages.success(request, f"Quota of {team_obj.name} on {model_obj.key} saved.")
    return redirect("quotas")


def _lowering_unconfirmed(request: HttpRequest, team: Team, model: GpuModel) -> str:
    """The warning to show before saving a nominal below the GPUs in use, unless the admin
    has seen it and confirmed ("" when there is nothing to confirm)."""
    if request.POST.get("confirm") == "1":
        return ""
    try:
        nominal = int(request.POST.get("nominal", ""))
    except ValueError:
        return ""  # quota_set names the field
    if nominal < 0:
        return ""  # likewise
    cell = quota_grid(teams=[team]).cells.get((team.pk, model.pk))
    if cell is None or nominal >= cell.nominal:
        return ""  # raising (or keeping) a nominal never needs a warning
    return quota_lowering_warning(team=team, model=model, nominal=nominal, in_use=cell.in_use)


def _quota_cell_warn(
    request: HttpRequest, team: Team, model: GpuModel, warning: str
) -> HttpResponse:
    """Nothing saved: the cell again, the admin's values kept, the warning and a confirm."""
    cell = quota_grid(teams=[team]).cells[(team.pk, model.pk)]
    context = {
        "team": team,
        "model": model,
        "cell": cell,
        "editable": True,
        "warning": warning,
        "proposed_nominal": request.POST.get("nominal", ""),
        "proposed_borrowing": request.POST.get("borrowing_limit", ""),
    }
    template = "scheduling/_quota_cell.html" if request.htmx else "scheduling/quota_confirm.html"
    return render(request, template, context)


@login_required
def match_preview(request: HttpRequest) -> HttpResponse:
    """The submit form's live preview: which models match, which is tried first."""
    params = request.GET.copy()
    if params.get("requirement") == "models":
        for name in ("min_gpu_memory_gib", "requires_bf16", "requires_fp8", "min_fp16_tflops"):
            params.pop(name, None)
    else:
        params.pop("gpu_models", None)
    try:
        preview = requirement_preview(params)
        error = None
    except SpecError as exc:
        preview, error = None, "; ".join(" ".join(v) for v in exc.fields.values())
    return render(request, "scheduling/_match.html", {"preview": preview, "error": error})
