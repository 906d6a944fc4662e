"""The submit form's live fragments: the models a requirement matches, the start estimate
(and a queued job's estimate with its alternatives)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from portal.access import (
    SUBMIT_ROLES,
    job_get_for_user,
    team_for_submit,
    team_roles_of,
)
from portal.errors import NotFound
from portal.jobs.services import submit_limits
from portal.jobs.spec import SpecError, parse_job_spec
from portal.models import Team
from portal.web.forms import JobSubmitForm
from rules.jobspec import CONSTRAINT_FIELDS
from scheduling.catalog import catalog_entries
from scheduling.estimates import job_estimate, spec_estimate
from scheduling.matching import requirement_preview
from scheduling.models import GpuModel
from scheduling.quota_check import beyond_quota_message
from scheduling.snapshot import pool_now


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
