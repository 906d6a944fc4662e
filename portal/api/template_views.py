"""REST for job templates: a thin viewset over ``portal.jobs.job_templates``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from portal.access import job_get_for_user, team_roles_of
from portal.api.body import request_object
from portal.api.query import query_params
from portal.api.schema import error
from portal.api.serializers import JobTemplateSerializer
from portal.errors import ApplicationError, NotFound
from portal.jobs.job_templates import (
    can_manage_template,
    template_create,
    template_delete,
    template_get_for_user,
    template_update,
    templates_visible_to,
)
from portal.models import JobTemplate, TemplateScope

EDITABLE = ("name", "description", "spec")


class TemplateQuery(serializers.Serializer):
    scope = serializers.ChoiceField(choices=TemplateScope.choices, required=False)
    team = serializers.SlugField(required=False, help_text="Team slug")


class JobTemplateViewSet(viewsets.GenericViewSet):
    """Job templates: built-in ones, your teams' (team admins manage them) and your own.

    A template's `spec` is a job request without `team`; submit from one by sending its spec
    with your team to `POST /api/v1/jobs/` (the form's "Start from a template" does that).
    """

    serializer_class = JobTemplateSerializer
    pagination_class = None
    filter_backends: list[Any] = []
    queryset = JobTemplate.objects.none()  # for the schema; requests use templates_visible_to

    def _context(self) -> dict[str, Any]:
        roles = team_roles_of(self.request.user)
        return {"can_manage": lambda t: can_manage_template(self.request.user, t, roles)}

    def _one(self, template: JobTemplate, code: int = status.HTTP_200_OK) -> Response:
        return Response(JobTemplateSerializer(template, context=self._context()).data, code)

    @extend_schema(parameters=[TemplateQuery], responses=JobTemplateSerializer(many=True))
    def list(self, request: Request) -> Response:
        query = query_params(TemplateQuery, request)
        templates = templates_visible_to(request.user)
        if scope := query.get("scope"):
            templates = templates.filter(scope=scope)
        if team := query.get("team"):
            templates = templates.filter(team__slug=team)
        context = self._context()
        rows = templates.order_by("scope", "name", "id")
        return Response([JobTemplateSerializer(t, context=context).data for t in rows])

    @extend_schema(
        request=JobTemplateSerializer,
        responses={
            201: JobTemplateSerializer,
            404: error("No such team among yours, or no such job to start from"),
            409: error("A template of that name already exists there"),
        },
    )
    def create(self, request: Request) -> Response:
        body = request_object(request)
        source = None
        if "from_job" in body and body["from_job"] is not None:
            try:
                source = job_get_for_user(request.user, body["from_job"])
            except NotFound:
                raise NotFound(
                    "The job to make a template of was not found.",
                    fields={"from_job": ["No job with this id among your teams' jobs."]},
                ) from None
        template = template_create(
            user=request.user,
            name=body.get("name"),
            description=body.get("description", ""),
            scope=body.get("scope"),
            team=body.get("team") or (source.team.slug if source else None),
            spec=body.get("spec"),
            from_job=source,
        )
        return self._one(template, status.HTTP_201_CREATED)

    @extend_schema(responses={200: JobTemplateSerializer})
    def retrieve(self, request: Request, pk: str) -> Response:
        return self._one(template_get_for_user(request.user, pk))

    def _change(self, request: Request, pk: str, *, whole: bool) -> Response:
        """PATCH changes the fields given; PUT restates the template, so its name and scope
        are required (the scope, and the team when given, as they are: both are fixed)."""
        template = template_get_for_user(request.user, pk)
        body = request_object(request)
        if whole:
            missing = [name for name in ("name", "scope") if name not in body]
            if missing:
                raise ApplicationError(
                    "A PUT gives the whole template.",
                    fields={name: ["This field is required."] for name in missing},
                )
        changes = {k: body[k] for k in body if k in (*EDITABLE, "scope", "team", "key")}
        # Restating the fixed fields as they are is no change.
        current = {
            "scope": template.scope,
            "team": template.team.slug if template.team else None,
            "key": template.key,
        }
        for name in ("scope", "team", "key"):
            if name in changes and changes[name] == current[name]:
                changes.pop(name)
        return self._one(template_update(user=request.user, template=template, changes=changes))

    @extend_schema(
        request=JobTemplateSerializer,
        responses={
            200: JobTemplateSerializer,
            409: error("A template of that name already exists there"),
        },
    )
    def update(self, request: Request, pk: str) -> Response:
        return self._change(request, pk, whole=True)

    @extend_schema(
        request=JobTemplateSerializer,
        responses={
            200: JobTemplateSerializer,
            409: error("A template of that name already exists there"),
        },
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        return self._change(request, pk, whole=False)

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request: Request, pk: str) -> Response:
        template_delete(user=request.user, template=template_get_for_user(request.user, pk))
        return Response(status=status.HTTP_204_NO_CONTENT)
