"""The OpenAPI schema says what every operation can answer, errors included.

Errors come from layers a view does not declare: authentication (401), permissions and CSRF
(403), the request guards and parsers (400 for a NUL, a bad cursor, JSON nested too deep),
Django's body limits (413), the router (404 for a path parameter that matches no route) and
throttles (429). Declaring them by hand on each view drifted (schemathesis found most of them
undocumented), so :class:`PortalAutoSchema` adds them from what the operation is: every one
can answer 400, 401, 403 and 429 (the token-failure limit guards every operation), one with
path parameters 404, one with a body 413. 409 is the views' own to declare, where a state or
a replayed key can conflict.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class ErrorFieldsSerializer(serializers.Serializer):
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Problems per field, e.g. {'gpus_per_replica': ['…']}; "
        "nested fields are named jobs[0].team",
    )


class ErrorSerializer(serializers.Serializer):
    """Every error the API answers: a message for people, the fields for programs."""

    message = serializers.CharField()
    extra = ErrorFieldsSerializer()


ERROR = ErrorSerializer
_BODY_METHODS = {"POST", "PUT", "PATCH"}


def error(description: str) -> OpenApiResponse:
    """An error response of the API's shape, for a view's own ``@extend_schema``."""
    return OpenApiResponse(ErrorSerializer, description=description)


class PortalAutoSchema(AutoSchema):
    """drf-spectacular's schema, plus the errors any operation of its kind can answer."""

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        for code, description in self._implied_errors().items():
            if str(code) not in responses:
                responses[str(code)] = self._get_response_for_code(
                    error(description), str(code), direction=direction
                )
        return responses

    def _implied_errors(self) -> dict[int, str]:
        errors = {
            400: "The request cannot be read or is invalid; extra.fields names what",
            401: "No valid credentials (a missing, expired or revoked token)",
            403: "Your role does not allow this (or a session request without its CSRF token)",
        }
        if "{" in self.path:
            errors[404] = "Not found, or another team's (the two look the same)"
        if self.method in _BODY_METHODS:
            errors[413] = "The body is larger than the limit the message names"
        # Every operation takes a token, and failed token attempts past the limit (from one
        # address, or for one token) are refused before any view runs; throttled operations
        # add their own rates.
        errors[429] = (
            "Too many requests, or too many failed token attempts from your address or with "
            "this token; retry after the Retry-After header's seconds"
        )
        return dict(sorted(errors.items()))
