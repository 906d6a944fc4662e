"""Job templates: named requests to start a submission from.

Who may do what (``docs/decisions.md``, *Job templates*):

- everyone sees the built-in templates, which ship as data in ``portal/data/job-templates.json``
  and are kept in sync with it on every ``migrate``; nobody edits them in the portal;
- a team's templates are seen by its members (viewers included) and platform admins, and
  created, edited and deleted by its team admins and platform admins;
- a personal template is seen and managed by its owner only, who must be a member or team
  admin of its team (the team it submits to by default).

A template's ``spec`` is a job request in the REST API's names, without ``team``. It is
validated as a job would be (``parse_job_spec``), so using a template never starts from a
request the portal would refuse, except where the catalog or limits changed since.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils.text import slugify

from portal.access import SUBMIT_ROLES, AnyUser, team_roles_of
from portal.catalog import catalog_entries
from portal.errors import ApplicationError, Conflict, Forbidden, NotFound
from portal.jobs.resubmit import job_request_data
from portal.jobs.services import submit_limits
from portal.jobs.spec import SpecError, parse_job_spec
from portal.models import Job, JobTemplate, Role, Team, TemplateScope
from portal.team_audit import changed_fields, team_change_record

BUILTIN_TEMPLATES_PATH = Path(__file__).resolve().parent.parent / "data" / "job-templates.json"
MAX_DESCRIPTION = 2000


def templates_visible_to(user: AnyUser) -> QuerySet[JobTemplate]:
    """Built-ins, the caller's teams' templates (every team's for platform admins), and the
    caller's own personal templates."""
    if not user.is_authenticated:
        return JobTemplate.objects.none()
    visible = Q(scope=TemplateScope.BUILTIN) | Q(scope=TemplateScope.PERSONAL, owner_id=user.pk)
    if user.is_staff:
        visible |= Q(scope=TemplateScope.TEAM)
    else:
        visible |= Q(scope=TemplateScope.TEAM, team__memberships__user_id=user.pk)
    return JobTemplate.objects.filter(visible).select_related("team", "owner").distinct()


def template_get_for_user(user: AnyUser, template_id: object) -> JobTemplate:
    """The template if the caller may see it, else NotFound (also for a malformed id)."""
    try:
        return templates_visible_to(user).get(pk=int(str(template_id)))
    except (JobTemplate.DoesNotExist, ValueError, TypeError) as exc:
        raise NotFound("Template not found.") from exc


def can_manage_template(
    user: AnyUser, template: JobTemplate, roles: Mapping[int, str] | None = None
) -> bool:
    """Team admins and platform admins manage a team's templates; owners their own."""
    if not user.is_authenticated or template.scope == TemplateScope.BUILTIN:
        return False
    if template.scope == TemplateScope.PERSONAL:
        return template.owner_id == user.pk
    if user.is_staff:
        return True
    role = (roles if roles is not None else team_roles_of(user)).get(template.team_id or 0)
    return role == Role.ADMIN


def _team_for(user: AnyUser, slug: Any, scope: str) -> Team:
    """The template's team, if the caller may keep a template of ``scope`` there."""
    team = Team.objects.filter(slug=slug).first() if isinstance(slug, str) and slug else None
    roles = team_roles_of(user)
    if team is None or (team.pk not in roles and not user.is_staff):
        raise NotFound("Team not found.", fields={"team": ["Not one of your teams."]})
    role = roles.get(team.pk)
    if scope == TemplateScope.TEAM and role != Role.ADMIN and not user.is_staff:
        raise Forbidden(
            f"Only {team.name}'s team admins manage its templates.",
            fields={"scope": ["Team templates are managed by team admins; save it as yours."]},
        )
    if scope == TemplateScope.PERSONAL and role not in SUBMIT_ROLES:
        raise Forbidden(
            f"Your role in {team.name} does not allow submitting jobs there.",
            fields={"team": ["Choose a team you submit jobs to."]},
        )
    return team


def _clean_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ApplicationError("Invalid template.", fields={"name": ["This field is required."]})
    name = " ".join(name.split())
    if len(name) > 100:
        raise ApplicationError("Invalid template.", fields={"name": ["At most 100 characters."]})
    return name


def _clean_description(description: Any) -> str:
    if description in (None, ""):
        return ""
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise ApplicationError(
            "Invalid template.",
            fields={"description": [f"Text of at most {MAX_DESCRIPTION} characters."]},
        )
    return description.strip()


def clean_template_spec(spec: Any, *, team: Team | None, name: str) -> dict[str, Any]:
    """``spec`` checked as the job it would submit; errors are keyed ``spec.<field>``.

    The team is the template's own, and a spec without a job name borrows one from the
    template's name, so that both are optional in the spec itself.
    """
    if not isinstance(spec, Mapping):
        raise ApplicationError(
            "Invalid template.", fields={"spec": ["An object of job request fields."]}
        )
    if "team" in spec:
        raise ApplicationError(
            "Invalid template.",
            fields={"spec.team": ["A template's team is its own `team`, not part of the spec."]},
        )
    candidate = {
        **spec,
        "team": team.slug if team else "builtin",
        "name": spec.get("name") or slugify(name)[:100] or "job",
    }
    try:
        parse_job_spec(candidate, catalog=catalog_entries(), limits=submit_limits())
    except SpecError as exc:
        raise ApplicationError(
            "The template's job request is invalid.",
            fields={f"spec.{k}": v for k, v in exc.fields.items()},
        ) from None
    return dict(spec)


@transaction.atomic
def template_create(
    *,
    user: AnyUser,
    name: Any,
    scope: Any,
    team: Any,
    spec: Any = None,
    description: Any = "",
    from_job: Job | None = None,
) -> JobTemplate:
    """Create a team or personal template, from ``spec`` or from a job's own request."""
    if scope not in (TemplateScope.TEAM, TemplateScope.PERSONAL):
        raise ApplicationError("Invalid template.", fields={"scope": ["Must be team or personal."]})
    name = _clean_name(name)
    owner_team = _team_for(user, team, str(scope))
    if from_job is not None:
        spec = {**job_request_data(from_job, with_team=False), **(spec or {})}
    spec = clean_template_spec(spec if spec is not None else {}, team=owner_team, name=name)
    template = JobTemplate(
        name=name,
        description=_clean_description(description),
        scope=scope,
        team=owner_team,
        owner=user if scope == TemplateScope.PERSONAL else None,
        spec=spec,
        created_by=user if user.is_authenticated else None,
    )
    _save_unique(template)
    _audit(user, template, "created", changed_fields({}, _audited(template)))
    return template


def _audited(template: JobTemplate) -> dict[str, Any]:
    """What the audit compares: the description and every spec field (the name is the row's
    subject, and an edit that renames says so)."""
    return {
        "description": template.description,
        **{f"spec.{k}": v for k, v in template.spec.items()},
    }


def _audit(user: AnyUser, template: JobTemplate, action: str, detail: str) -> None:
    """A team template's change goes to the team's audit; a personal one is nobody else's."""
    if template.scope == TemplateScope.TEAM and template.team is not None:
        team_change_record(
            team=template.team,
            actor=user,
            kind="template",
            action=action,
            subject=template.name,
            detail=detail,
        )


@transaction.atomic
def template_update(
    *, user: AnyUser, template: JobTemplate, changes: Mapping[str, Any]
) -> JobTemplate:
    """Change a template's name, description or spec; its scope and team stay as created."""
    if not can_manage_template(user, template):
        raise Forbidden(_not_yours(template))
    fixed = sorted(set(changes) & {"scope", "team", "key"})
    if fixed:
        raise ApplicationError(
            "A template's scope and team are fixed; make a new template instead.",
            fields={name: ["Cannot be changed."] for name in fixed},
        )
    before = {"name": template.name, **_audited(template)}
    if "name" in changes:
        template.name = _clean_name(changes["name"])
    if "description" in changes:
        template.description = _clean_description(changes["description"])
    if "spec" in changes:
        template.spec = clean_template_spec(changes["spec"], team=template.team, name=template.name)
    _save_unique(template)
    detail = changed_fields(before, {"name": template.name, **_audited(template)})
    if detail:  # saving the form unchanged is no change
        _audit(user, template, "edited", detail)
    return template


@transaction.atomic
def template_delete(*, user: AnyUser, template: JobTemplate) -> None:
    if not can_manage_template(user, template):
        raise Forbidden(_not_yours(template))
    _audit(user, template, "deleted", "")
    template.delete()


def _not_yours(template: JobTemplate) -> str:
    if template.scope == TemplateScope.BUILTIN:
        return "Built-in templates ship with the portal and cannot be changed; copy one instead."
    if template.scope == TemplateScope.TEAM:
        return "Only the team's admins can change its templates."
    return "Only its owner can change a personal template."


def _save_unique(template: JobTemplate) -> None:
    try:
        with transaction.atomic():
            template.save()
    except IntegrityError:
        where = "your templates" if template.scope == TemplateScope.PERSONAL else "the team"
        raise Conflict(
            f"A template named {template.name!r} already exists in {where}.",
            fields={"name": ["Already used; choose another name."]},
        ) from None


def template_request_data(template: JobTemplate, *, team: Team | None = None) -> dict[str, Any]:
    """The job request a template starts: its spec, in the template's team (or ``team``)."""
    data = dict(template.spec)
    chosen = team or template.team
    if chosen is not None:
        data["team"] = chosen.slug
    return data


# ---------------------------------------------------------------------------------------------
# Built-in templates, shipped as data
# ---------------------------------------------------------------------------------------------
def builtin_templates_read(path: Path = BUILTIN_TEMPLATES_PATH) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        rows = json.load(fh)
    return [dict(r) for r in rows]


def builtin_templates_sync(path: Path = BUILTIN_TEMPLATES_PATH, *, using: str = "default") -> int:
    """Make the built-in templates in the database match the data file; returns how many.

    Run after every ``migrate`` (and after a test database flush, which sends the same
    signal), like Django's own content types: the file is the truth, edits made to the rows
    by hand are undone, and a template dropped from the file disappears.
    """
    rows = builtin_templates_read(path)
    keys = [r["key"] for r in rows]
    templates = JobTemplate.objects.using(using)
    with transaction.atomic(using=using):
        for row in rows:
            templates.update_or_create(
                key=row["key"],
                defaults={
                    "name": row["name"],
                    "description": row.get("description", ""),
                    "scope": TemplateScope.BUILTIN,
                    "team": None,
                    "owner": None,
                    "spec": row["spec"],
                },
            )
        templates.filter(scope=TemplateScope.BUILTIN).exclude(key__in=keys).delete()
    return len(rows)


def builtin_templates_on_migrate(*, using: str = "default", apps: Any = None, **_: Any) -> None:
    """``post_migrate``: sync the built-ins, unless the database was migrated to a state that
    has no template table yet."""
    if apps is not None:
        try:
            apps.get_model("portal", "JobTemplate")
        except LookupError:
            return
    builtin_templates_sync(using=using)
