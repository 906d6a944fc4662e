"""Job template pages: list, create (from scratch or from a job), edit, delete.

The template's job request is edited with the submit form's own fields, so a template reads
like the job it starts; the rules (who may manage what) are the services'.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from portal.access import job_get_for_user, team_roles_of
from portal.errors import ApplicationError, NotFound
from portal.jobs.job_templates import (
    can_manage_template,
    template_create,
    template_delete,
    template_get_for_user,
    template_update,
    templates_visible_to,
)
from portal.jobs.resubmit import job_request_data
from portal.models import JobTemplate, TemplateScope
from portal.web.forms import (
    JobSubmitForm,
    TemplateForm,
    error_list,
    initial_from_request,
    template_spec_from,
)
from portal.web.views import _submit_form_kwargs, _submit_teams, command_line

TEMPLATE_FIELDS = {"name": "template_name", "description": "description", "scope": "scope"}
TEMPLATE_FIELDS["team"] = "template_team"


def _template_or_404(request: HttpRequest, template_id: int) -> JobTemplate:
    try:
        return template_get_for_user(request.user, template_id)
    except NotFound as exc:
        raise Http404("Template not found.") from exc


@login_required
def template_list(request: HttpRequest) -> HttpResponse:
    roles = team_roles_of(request.user)
    rows = [
        (t, can_manage_template(request.user, t, roles))
        for t in templates_visible_to(request.user).order_by("scope", "team__name", "name")
    ]
    groups: dict[str, list[tuple[JobTemplate, bool, str]]] = {}
    for t, manage in rows:
        label = {
            TemplateScope.BUILTIN: "Built-in",
            TemplateScope.PERSONAL: "Mine",
        }.get(TemplateScope(t.scope), f"Team {t.team.name if t.team else ''}")
        spec = t.spec if isinstance(t.spec, dict) else {}
        runs = command_line(spec.get("command"), spec.get("args"))
        groups.setdefault(label, []).append((t, manage, runs))
    order = ["Built-in", *sorted(k for k in groups if k.startswith("Team ")), "Mine"]
    context = {
        "groups": [(k, groups[k]) for k in order if k in groups],
        "can_create": bool(_submit_teams(request)),
    }
    return render(request, "jobs/templates.html", context)


def _apply_errors(exc: ApplicationError, meta: TemplateForm, job: JobSubmitForm) -> None:
    """The service's errors on the field they name: ``spec.<field>`` on the job's fields."""
    for name, msgs in (exc.fields or {"__all__": [exc.message]}).items():
        if name.startswith("spec."):
            job.add_spec_errors({name.removeprefix("spec."): msgs})
        elif name in TEMPLATE_FIELDS and TEMPLATE_FIELDS[name] in meta.fields:
            for message in msgs:
                meta.add_error(TEMPLATE_FIELDS[name], message)
        else:
            for message in msgs:
                meta.add_error(None, message if name == "__all__" else f"{name}: {message}")


def _render_form(
    request: HttpRequest,
    meta: TemplateForm,
    job: JobSubmitForm,
    template: JobTemplate | None,
    status: int = 200,
    source: Any = None,
) -> HttpResponse:
    errors = error_list(meta, job)
    non_field = [*meta.non_field_errors(), *job.non_field_errors()] if meta.is_bound else []
    context = {
        "meta": meta,
        "form": job,
        "template": template,
        "errors": errors,
        "non_field_errors": non_field,
        "source_job": source,
    }
    return render(request, "jobs/template_form.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def template_new(request: HttpRequest) -> HttpResponse:
    """A new template, blank or (``?from_job=``) with a job's request."""
    teams = _submit_teams(request)
    if not teams:
        raise Http404("You are in no team you can submit to.")
    source = None
    initial: dict[str, Any] = {}
    meta_initial: dict[str, Any] = {"template_team": teams[0].slug}
    if from_job := request.GET.get("from_job") or request.POST.get("from_job"):
        try:
            source = job_get_for_user(request.user, from_job)
        except NotFound as exc:
            raise Http404("Job not found.") from exc
        initial = initial_from_request(job_request_data(source, with_team=False))
        meta_initial["template_name"] = source.name
        if source.team.slug in {t.slug for t in teams}:
            meta_initial["template_team"] = source.team.slug
    bound = request.POST if request.method == "POST" else None
    meta = TemplateForm(bound, teams=teams, initial=meta_initial)
    job = JobSubmitForm(bound, initial=initial, for_template=True, **_submit_form_kwargs(teams))
    if request.method == "POST":
        meta.is_valid()
        job.is_valid()
        spec = template_spec_from(job)
        if not meta.errors and not job.errors:
            try:
                template = template_create(
                    user=request.user,
                    name=meta.cleaned_data["template_name"],
                    description=meta.cleaned_data.get("description", ""),
                    scope=meta.cleaned_data["scope"],
                    team=meta.cleaned_data["template_team"],
                    spec=spec,
                )
            except ApplicationError as exc:
                _apply_errors(exc, meta, job)
            else:
                messages.success(request, f"Template {template.name} saved.")
                return redirect("template-list")
        return _render_form(request, meta, job, None, status=400, source=source)
    return _render_form(request, meta, job, None, source=source)


@login_required
@require_http_methods(["GET", "POST"])
def template_edit(request: HttpRequest, template_id: int) -> HttpResponse:
    template = _template_or_404(request, template_id)
    if not can_manage_template(request.user, template):
        raise Http404("You cannot change this template.")
    teams = _submit_teams(request)
    bound = request.POST if request.method == "POST" else None
    meta = TemplateForm(
        bound,
        teams=teams,
        editing=True,
        initial={"template_name": template.name, "description": template.description},
    )
    job = JobSubmitForm(
        bound,
        initial=initial_from_request(template.spec),
        for_template=True,
        **_submit_form_kwargs(teams),
    )
    if request.method == "POST":
        meta.is_valid()
        job.is_valid()
        spec = template_spec_from(job)
        if not meta.errors and not job.errors:
            try:
                template_update(
                    user=request.user,
                    template=template,
                    changes={
                        "name": meta.cleaned_data["template_name"],
                        "description": meta.cleaned_data.get("description", ""),
                        "spec": spec,
                    },
                )
            except ApplicationError as exc:
                _apply_errors(exc, meta, job)
            else:
                messages.success(request, f"Template {template.name} saved.")
                return redirect("template-list")
        return _render_form(request, meta, job, template, status=400)
    return _render_form(request, meta, job, template)


@login_required
@require_http_methods(["GET", "POST"])
def template_delete_view(request: HttpRequest, template_id: int) -> HttpResponse:
    """GET asks for confirmation; POST deletes."""
    template = _template_or_404(request, template_id)
    if not can_manage_template(request.user, template):
        raise Http404("You cannot delete this template.")
    if request.method == "GET":
        return render(request, "jobs/template_delete.html", {"template": template})
    template_delete(user=request.user, template=template)
    messages.success(request, f"Template {template.name} deleted.")
    return redirect("template-list")
