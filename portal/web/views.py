"""Server-rendered pages. Each view parses, calls a selector or service, and renders."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from portal.access import (
    SUBMIT_ROLES,
    can_cancel,
    job_get_for_user,
    jobs_visible_to,
    team_roles_of,
    teams_visible_to,
)
from portal.errors import ApplicationError, NotFound
from portal.jobs.services import job_cancel, job_submit
from portal.jobs.spec import SpecError
from portal.models import ApiToken, Job, JobState, Team
from portal.tokens import api_token_create, api_token_revoke
from portal.web.forms import JobSubmitForm
from scheduling.models import GpuModel

PAGE_SIZE = 50


def _job_or_404(request: HttpRequest, job_id: str) -> Job:
    try:
        return job_get_for_user(request.user, job_id)
    except NotFound as exc:
        raise Http404("Job not found.") from exc


def _int_param(request: HttpRequest, name: str) -> int | None:
    try:
        return int(request.GET[name])
    except (KeyError, ValueError):
        return None


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The pool overview is the home page (``dashboards``)."""
    from dashboards.views import pool_overview_page

    return pool_overview_page(request)


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    """My jobs, or a team's jobs; filtered by state; keyset-paginated (newest first)."""
    scope = "team" if request.GET.get("scope") == "team" else "mine"
    teams = list(teams_visible_to(request.user).distinct())
    jobs = jobs_visible_to(request.user).select_related(
        "team", "owner", "gpu_model", "cluster", "volcano"
    )
    team_slug = request.GET.get("team", "")
    if scope == "mine":
        jobs = jobs.filter(owner_id=request.user.pk)
    elif team_slug:
        jobs = jobs.filter(team__slug=team_slug)
    states = [s for s in request.GET.getlist("state") if s in JobState.values]
    if states:
        jobs = jobs.filter(state__in=states)
    before = _int_param(request, "before")
    if before is not None:
        jobs = jobs.filter(id__lt=before)
    page = list(jobs.order_by("-id")[: PAGE_SIZE + 1])
    has_more = len(page) > PAGE_SIZE
    page = page[:PAGE_SIZE]
    query = request.GET.copy()
    query.pop("before", None)
    if has_more:
        query["before"] = str(page[-1].pk)
    context = {
        "jobs": page,
        "scope": scope,
        "teams": teams,
        "team_slug": team_slug,
        "states": JobState.values,
        "selected_states": states,
        "next_query": query.urlencode() if has_more else "",
        "is_first_page": before is None,
    }
    template = "jobs/_job_table.html" if request.htmx else "jobs/list.html"
    return render(request, template, context)


@login_required
def job_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    job = _job_or_404(request, job_id)
    events = list(job.events.select_related("actor"))
    return render(
        request,
        "jobs/detail.html",
        {
            "job": job,
            "events": events,
            "can_cancel": can_cancel(request.user, job) and not job.is_terminal,
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def job_cancel_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """GET asks for confirmation; POST cancels."""
    job = _job_or_404(request, job_id)
    if request.method == "GET":
        return render(request, "jobs/cancel_confirm.html", {"job": job})
    try:
        job = job_cancel(job=job, by=request.user)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Job {job.name} is {job.get_state_display().lower()}.")
    return redirect("job-detail", job_id=job.public_id)


def _submit_teams(request: HttpRequest) -> list[Team]:
    roles = team_roles_of(request.user)
    return [t for t in Team.objects.filter(pk__in=roles) if roles[t.pk] in SUBMIT_ROLES]


@login_required
@require_http_methods(["GET", "POST"])
def job_submit_view(request: HttpRequest) -> HttpResponse:
    teams = _submit_teams(request)
    form = JobSubmitForm(request.POST or None, teams=teams)
    if request.method == "POST" and form.is_valid():
        data = form.to_spec_data()
        if form.is_valid():  # conversion (shell quoting, env lines) may have added errors
            try:
                result = job_submit(user=request.user, data=data)
            except SpecError as exc:
                form.add_spec_errors(exc.fields)
            except ApplicationError as exc:
                form.add_spec_errors(exc.fields or {"__all__": [exc.message]})
            else:
                messages.success(request, f"Job {result.job.name} submitted.")
                return redirect("job-detail", job_id=result.job.public_id)
    status = 400 if request.method == "POST" else 200
    context: dict[str, Any] = {
        "form": form,
        "teams": teams,
        "gpu_models": GpuModel.objects.filter(active=True),
    }
    return render(request, "jobs/submit.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    """Create a personal API token (shown once) and see or revoke existing ones."""
    new_token = None
    if request.method == "POST":
        _token, new_token = api_token_create(user=request.user, name=request.POST.get("name", ""))
    tokens = ApiToken.objects.filter(user=request.user)
    return render(request, "tokens/list.html", {"tokens": tokens, "new_token": new_token})


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = ApiToken.objects.filter(user=request.user, pk=token_id).first()
    if token is not None:
        api_token_revoke(token=token)
        messages.success(request, f"Token {token.name} revoked.")
    return redirect(reverse("token-list"))
