"""Server-rendered pages. Each view parses, calls a selector or service, and renders."""

from __future__ import annotations

import contextlib
import math
import shlex
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.db.models import F
from django.db.models.functions import Coalesce, Now
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from portal.access import (
    SUBMIT_ROLES,
    can_cancel,
    job_get_for_user,
    jobs_visible_to,
    others_ahead,
    team_roles_of,
    teams_visible_to,
)
from portal.api.throttles import SubmitThrottle
from portal.catalog import GpuModel, TeamPolicy, catalog_entries
from portal.errors import ApplicationError, NotFound
from portal.inventory import models_unavailable
from portal.jobs.attempts import attempt_events, job_attempt, job_attempts
from portal.jobs.blocker import blocker_of, blocker_sentence, start_estimate
from portal.jobs.bulk import admin_team_ids, jobs_cancel_bulk
from portal.jobs.job_templates import (
    template_get_for_user,
    template_request_data,
    templates_visible_to,
)
from portal.jobs.resubmit import job_request_data, resubmit_note
from portal.jobs.services import job_cancel, job_submit, submit_limits
from portal.jobs.spec import SpecError, parse_job_spec
from portal.jobs.state import PREEMPTED_REASON, USER_CANCEL_REASON
from portal.jobs.waits import queue_positions_fill
from portal.models import (
    ApiToken,
    Job,
    JobEvent,
    JobState,
    JobTemplate,
    Priority,
    Role,
    Team,
    TemplateScope,
)
from portal.tokens import api_token_create, api_token_revoke
from portal.web.forms import JobSubmitForm, error_list, initial_from_request

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


def command_line(command: object, args: object) -> str:
    """A job's command and arguments as one line a user can paste into a POSIX shell: each
    word quoted where it needs to be (``sh -c 'torchrun --nproc 8 train.py'``), so what they
    copy runs what the job runs."""
    words = [w for part in (command, args) if isinstance(part, list) for w in part]
    return shlex.join(str(w) for w in words)


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    """My jobs, or a team's jobs; filtered by state, owner (team scope) and name; sorted
    newest first (keyset-paginated) or by another order (paged by offset)."""
    scope = "team" if request.GET.get("scope") == "team" else "mine"
    teams = list(teams_visible_to(request.user).distinct())
    jobs = jobs_visible_to(request.user).select_related(
        "team", "owner", "gpu_model", "cluster", "volcano", "wait"
    )
    team_slug = request.GET.get("team", "")
    owner = request.GET.get("owner", "")[:150] if scope == "team" else ""
    if scope == "mine":
        jobs = jobs.filter(owner_id=request.user.pk)
    elif team_slug:
        jobs = jobs.filter(team__slug=team_slug)
    if owner:
        jobs = jobs.filter(owner__username=owner)
    q = " ".join(request.GET.get("q", "").split())[:100]
    if q:
        jobs = jobs.filter(name__icontains=q)
    states = [s for s in request.GET.getlist("state") if s in JobState.values]
    if states:
        jobs = jobs.filter(state__in=states)
    sort = request.GET.get("sort", "")
    sort = sort if sort in JOB_SORTS else "newest"
    query = request.GET.copy()
    query.pop("before", None)
    query.pop("page", None)
    before = _int_param(request, "before") if sort == "newest" else None
    number = max(1, min(_int_param(request, "page") or 1, 1000)) if sort != "newest" else 1
    if before is not None:
        jobs = jobs.filter(id__lt=before)
    if sort == "newest":
        ordered = jobs.order_by("-id")
    elif sort == "duration":  # longest first; jobs that never started last
        ran = Coalesce(F("finished_at"), Now()) - F("started_at")
        ordered = jobs.annotate(ran=ran).order_by(F("ran").desc(nulls_last=True), "-id")
    else:
        ordered = jobs.order_by(*JOB_SORTS[sort])
    start = (number - 1) * PAGE_SIZE
    page = list(ordered[start : start + PAGE_SIZE + 1])
    has_more = len(page) > PAGE_SIZE
    page = page[:PAGE_SIZE]
    queue_positions_fill(page)
    if has_more and sort == "newest":
        query["before"] = str(page[-1].pk)
    elif has_more:
        query["page"] = str(number + 1)
    now = timezone.now()
    # Roles are read only where they matter: the team scope's bulk cancel, an empty page.
    roles = team_roles_of(request.user) if scope == "team" or not page else {}
    admin_of = admin_team_ids(request.user, roles) if scope == "team" else set()
    for job in page:
        ran = (job.finished_at or now) - job.started_at if job.started_at else None
        job.ran_for = _ran_words(ran.total_seconds()) if ran is not None else ""
        # The waiting column says what the job page says: the one plain sentence.
        job.waits_because = (
            blocker_sentence(job.pending_reason_code, job.pending_reason)
            if job.state == JobState.QUEUED
            else ""
        )
        job.bulk_ok = (
            scope == "team"
            and not job.is_terminal
            and (admin_of is None or job.team_id in admin_of)
        )
    filtered = bool(states) or bool(q) or bool(owner) or (scope == "team" and bool(team_slug))
    first = request.GET.copy()
    for key in ("before", "page"):
        first.pop(key, None)
    context = {
        "jobs": page,
        "filtered": filtered,
        # Only an empty first page invites a first submit, and only someone who may submit.
        "can_submit": not page and not filtered and any(r in SUBMIT_ROLES for r in roles.values()),
        "scope": scope,
        "teams": teams,
        "team_slug": team_slug,
        "owners": _owners_of(teams) if scope == "team" else [],
        "owner": owner,
        "q": q,
        "sort": sort,
        "sorts": JOB_SORT_WORDS,
        "states": JobState.values,
        "selected_states": states,
        "next_query": query.urlencode() if has_more else "",
        "first_query": first.urlencode(),
        "is_first_page": before is None and number == 1,
        # Bulk cancel: a team admin (or platform admin) ticks jobs of the teams they run.
        "can_bulk_cancel": scope == "team" and (admin_of is None or bool(admin_of)),
    }
    template = "jobs/_job_table.html" if request.htmx else "jobs/list.html"
    return render(request, template, context)


JOB_SORTS: dict[str, tuple[str, ...]] = {
    "newest": ("-id",),
    "oldest": ("id",),
    "name": ("name", "-id"),
    "duration": (),
}
JOB_SORT_WORDS = {
    "newest": "Newest first",
    "oldest": "Oldest first",
    "name": "Name (A to Z)",
    "duration": "Longest run first",
}


def _ran_words(seconds: float) -> str:
    """How long a job ran (or has run): "2 h 05 min", "14 min", "40 s"."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    if hours >= 48:
        return f"{hours // 24} d {hours % 24} h"
    if hours:
        return f"{hours} h {rest // 60:02d} min"
    if total >= 60:
        return f"{total // 60} min"
    return f"{total} s"


def _owners_of(teams: list[Any]) -> list[str]:
    """The usernames the owner filter offers: members of the teams the caller sees."""
    return list(
        get_user_model()
        ._default_manager.filter(memberships__team__in=teams)
        .order_by("username")
        .values_list("username", flat=True)
        .distinct()[:500]
    )


@login_required
@require_POST
def job_bulk_cancel(request: HttpRequest) -> HttpResponse:
    """Cancel the ticked jobs of the teams the caller administers, with one reason."""
    back = request.POST.get("next", "")
    back = back if back.startswith("/jobs/?") else reverse("job-list") + "?scope=team"
    try:
        result = jobs_cancel_bulk(
            user=request.user,
            public_ids=request.POST.getlist("job"),
            reason=request.POST.get("reason", ""),
        )
    except ApplicationError as exc:
        for msgs in (exc.fields or {"__all__": [exc.message]}).values():
            for m in msgs:
                messages.error(request, m)
        return redirect(back)
    n = len(result.cancelled)
    said = f"Cancelled {n} job{'s' if n != 1 else ''}."
    if result.skipped:
        said += (
            f" {result.skipped} not cancelled: already finished, or not a job of a team you "
            "administer."
        )
    messages.success(request, said)
    return redirect(back)


@login_required
def job_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    """A job's page. While the job is not terminal its live parts refresh themselves:
    ``?fragment=live`` answers them alone (the state and why it waits, with the placement and
    the timeline swapped out of band)."""
    job = _job_or_404(request, job_id)
    events = list(job.events.select_related("actor"))
    attempts = job_attempts(job)
    blocker = blocker_of(job)
    # Positions rank the whole queue; the jobs ahead the viewer cannot see, in words.
    hidden = others_ahead(request.user, job) if blocker is not None else None
    context = {
        "job": job,
        "command_line": command_line(job.command, job.args),
        "placement_message": str((job.placement or {}).get("message") or ""),
        "events": events,
        "attempts": attempts,
        "current_attempt": attempts[-1] if attempts and attempts[-1].current else None,
        "can_cancel": can_cancel(request.user, job) and not job.is_terminal,
        "can_resubmit": bool(_submit_teams(request)),
        "cancel_event": _cancel_event(events),
        "preempted_event": _preempted_event(events),
        "blocker": blocker,
        "hidden_ahead": hidden,
        "estimate": start_estimate(job, timezone.now()) if blocker is not None else None,
        "now": timezone.now(),
    }
    if request.GET.get("fragment") == "live":
        return render(request, "jobs/_live.html", {**context, "fragment": True})
    return render(request, "jobs/detail.html", context)


def _preempted_event(events: list[JobEvent]) -> JobEvent | None:
    """The scheduler's last reclaim of this job: its words say who reclaimed what and why."""
    return next(
        (
            e
            for e in reversed(events)
            if e.to_state == JobState.PREEMPTING and e.reason == PREEMPTED_REASON
        ),
        None,
    )


def _cancel_event(events: list[JobEvent]) -> JobEvent | None:
    """The user's cancel, if the job was cancelled by someone (its actor and words)."""
    return next((e for e in reversed(events) if e.reason == USER_CANCEL_REASON), None)


@login_required
def job_attempt_view(request: HttpRequest, job_id: str, number: int) -> HttpResponse:
    """One attempt: where it ran and why, its part of the timeline, and its logs (the kept
    tail for a run whose pods were deleted, the live viewer for the current run)."""
    job = _job_or_404(request, job_id)
    attempt = job_attempt(job, number)
    if attempt is None:
        raise Http404("No such attempt.")
    attempts = job_attempts(job)
    events = list(attempt_events(job, attempt))
    placement = attempt.placement or {}
    return render(
        request,
        "jobs/attempt.html",
        {
            "job": job,
            "attempt": attempt,
            "placement_message": str(placement.get("message") or ""),
            "events": events,
            "attempt_count": len(attempts),
            "live_logs": attempt.current and job.cluster_id is not None,
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def job_cancel_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """GET asks for confirmation and an optional reason; POST cancels."""
    job = _job_or_404(request, job_id)
    if request.method == "GET":
        return render(request, "jobs/cancel_confirm.html", {"job": job})
    reason = request.POST.get("reason", "")
    try:
        job = job_cancel(job=job, by=request.user, reason=reason)
    except ApplicationError as exc:
        if "reason" in exc.fields:  # the only thing the user can fix here: ask again
            context = {"job": job, "reason": reason, "error": " ".join(exc.fields["reason"])}
            return render(request, "jobs/cancel_confirm.html", context, status=400)
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Job {job.name} is {job.get_state_display().lower()}.")
    return redirect("job-detail", job_id=job.public_id)


def _submit_teams(request: HttpRequest) -> list[Team]:
    roles = team_roles_of(request.user)
    return [t for t in Team.objects.filter(pk__in=roles) if roles[t.pk] in SUBMIT_ROLES]


def _priority_limits(teams: list[Team]) -> dict[str, str]:
    """The highest priority each team may submit, by team name (normal without a policy)."""
    stored = dict(TeamPolicy.objects.filter(team__in=teams).values_list("team_id", "max_priority"))
    return {t.name: Priority(stored.get(t.pk, Priority.NORMAL)).label for t in teams}


def _last_team(request: HttpRequest, teams: list[Team]) -> str | None:
    """The team the user last submitted to, if they still may (the newest of their jobs)."""
    slug = (
        Job.objects.filter(owner_id=request.user.pk)
        .order_by("-id")
        .values_list("team__slug", flat=True)
        .first()
    )
    return slug if slug in {t.slug for t in teams} else None


def _starting_point(
    request: HttpRequest, teams: list[Team]
) -> tuple[dict[str, Any], Job | None, JobTemplate | None]:
    """What the form starts from: a job to resubmit (``?from_job=``), a template
    (``?template=``), or a blank job; plus the job or template it came from."""
    source_job = template = None
    data: dict[str, Any] = {}
    if from_job := request.GET.get("from_job"):
        try:
            source_job = job_get_for_user(request.user, from_job)
        except NotFound as exc:
            raise Http404("Job not found.") from exc
        data = job_request_data(source_job)
    elif template_id := request.GET.get("template"):
        try:
            template = template_get_for_user(request.user, template_id)
        except NotFound as exc:
            raise Http404("Template not found.") from exc
        data = template_request_data(template)
    allowed = {t.slug for t in teams}
    if data.get("team") not in allowed:
        data["team"] = _last_team(request, teams) or (teams[0].slug if len(teams) == 1 else None)
    return initial_from_request(data), source_job, template


def _form_templates(request: HttpRequest, teams: list[Team]) -> list[tuple[str, list[JobTemplate]]]:
    """Templates to start from, grouped for the picker: built-in, each team's, the user's."""
    allowed = {t.pk for t in teams}
    groups: dict[str, list[JobTemplate]] = {}
    for t in templates_visible_to(request.user).order_by("name"):
        if t.scope == TemplateScope.BUILTIN:
            groups.setdefault("Built-in", []).append(t)
        elif t.team_id in allowed and t.scope == TemplateScope.TEAM:
            groups.setdefault(f"Team {t.team.name}", []).append(t)
        elif t.team_id in allowed:
            groups.setdefault("Mine", []).append(t)
    order = ["Built-in", *sorted(k for k in groups if k.startswith("Team ")), "Mine"]
    return [(k, groups[k]) for k in order if k in groups]


def _submit_form_kwargs(teams: list[Team]) -> dict[str, Any]:
    """What the submit form needs to know of the pool: the catalog, which models no cluster
    has (and why), the submit bounds, and whether any shared GPU pool exists (the share
    fields mean nothing without one)."""
    catalog = list(GpuModel.objects.filter(active=True).values_list("key", "display_name"))
    return {
        "shared_pools": GpuModel.objects.filter(active=True, shares__isnull=False).exists(),
        "teams": teams,
        "models": [(k, f"{name} ({k})") for k, name in catalog],
        "unavailable": models_unavailable([k for k, _ in catalog]),
        "limits": submit_limits(),
        "priority_limits": _priority_limits(teams),
    }


def _submit_form(
    request: HttpRequest, teams: list[Team], initial: dict[str, Any] | None = None
) -> JobSubmitForm:
    bound = request.POST if request.method == "POST" else None
    return JobSubmitForm(bound, initial=initial, **_submit_form_kwargs(teams))


def _submit_posted(request: HttpRequest, form: JobSubmitForm) -> tuple[Job | None, int]:
    """Validate everything in one pass (the form's conversions and the spec's rules), and
    submit when nothing is wrong; (the new job, 302), or (None, the status) with the form's
    errors set."""
    form.is_valid()
    data = form.to_spec_data()
    try:
        parse_job_spec(data, catalog=catalog_entries(), limits=submit_limits())
    except SpecError as exc:
        form.add_spec_errors(exc.fields)
    if form.errors:
        return None, 400
    try:
        result = job_submit(user=request.user, data=data)
    except SpecError as exc:
        form.add_spec_errors(exc.fields)
        return None, 400
    except ApplicationError as exc:
        # The API's status too: 403 for a priority the team may not use, 409 for a full
        # queue, 404 for a team the user is not in.
        form.add_spec_errors(exc.fields or {"__all__": [exc.message]})
        return None, exc.status
    source = request.POST.get("from_job")
    if result.created and source:
        # A resubmit of a job no longer visible is still a good job, just without the note.
        with contextlib.suppress(NotFound):
            resubmit_note(job=result.job, source=job_get_for_user(request.user, source))
    return result.job, 302


@login_required
@require_http_methods(["GET", "POST"])
def job_submit_view(request: HttpRequest) -> HttpResponse:
    teams = _submit_teams(request)
    if not teams:
        # Why not, in the words that fit: a viewer is in teams, just not as a member.
        viewing = Team.objects.filter(
            memberships__user_id=request.user.pk, memberships__role=Role.VIEWER
        ).order_by("name")
        return render(request, "jobs/submit.html", {"teams": teams, "viewer_teams": viewing})
    source_job = template = None
    initial: dict[str, Any] = {}
    if request.method == "GET":
        initial, source_job, template = _starting_point(request, teams)
    form = _submit_form(request, teams, initial)
    status = 200
    wait = _submit_wait(request) if request.method == "POST" else None
    if wait is not None:
        form.is_valid()  # the fields are shown back as typed, with the refusal on top
        form.add_error(
            None,
            f"You are submitting jobs faster than {settings.GPUPOOL_SUBMIT_RATE} (the form and "
            f"the API together); try again in {wait} s.",
        )
        status = 429
    elif request.method == "POST":
        job, status = _submit_posted(request, form)
        if job is not None:
            messages.success(request, f"Job {job.name} submitted.")
            return redirect("job-detail", job_id=job.public_id)
    if source := request.POST.get("from_job"):
        try:
            source_job = job_get_for_user(request.user, source)
        except NotFound:
            source_job = None
    context: dict[str, Any] = {
        "form": form,
        "teams": teams,
        "errors": error_list(form),
        "non_field_errors": form.non_field_errors() if form.is_bound else [],
        "source_job": source_job,
        "template": template,
        "templates": _form_templates(request, teams),
        "gpu_models": GpuModel.objects.filter(active=True),
    }
    response = render(request, "jobs/submit.html", context, status=status)
    if wait is not None:
        response["Retry-After"] = str(wait)
    return response


def _submit_wait(request: HttpRequest) -> int | None:
    """Whole seconds to wait when this user is over the submit rate, counted together with
    the API's submits (one throttle, one cache key per user); None when the submit may go."""
    throttle = SubmitThrottle()
    if throttle.allow_request(request, None):  # type: ignore[arg-type]
        return None
    return max(1, math.ceil(throttle.wait() or 1))


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
