"""One error shape for the whole API: ``{"message": …, "extra": {"fields": {name: [..]}}}``."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from portal.errors import ApplicationError, error_body, too_large_message
from portal.jobs.spec import SpecError


def _error(
    message: str, fields: dict[str, Any] | None, code: int, headers: dict[str, str] | None = None
) -> Response:
    return Response(error_body(message, fields), status=code, headers=headers)


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested ``detail`` as ``{"field": [messages]}`` (nested names joined with dots)."""
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            out.update(_flatten(value, name))
        return out
    if isinstance(detail, list) and detail and all(not isinstance(d, dict | list) for d in detail):
        return {prefix or "non_field_errors": [str(d) for d in detail]}
    if isinstance(detail, list):
        out = {}
        for i, value in enumerate(detail):
            out.update(_flatten(value, f"{prefix}[{i}]"))
        return out
    return {prefix or "non_field_errors": [str(detail)]}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, SpecError):
        return _error(exc.message, exc.fields, status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, ApplicationError):
        return _error(exc.message, exc.fields, exc.status)
    if isinstance(exc, Http404):
        return _error("Not found.", None, status.HTTP_404_NOT_FOUND)
    if isinstance(exc, PermissionDenied):
        return _error("You do not have permission to do this.", None, status.HTTP_403_FORBIDDEN)
    if isinstance(exc, SuspiciousOperation):
        # A body over Django's size or field-count limits (read by the parser), or another
        # request Django refuses to read: the caller's to fix, never a 500.
        too_large = too_large_message(exc)
        if too_large is not None:
            return _error(too_large, None, status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
        return _error("The request could not be read.", None, status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, exceptions.ValidationError):
        return _error("Invalid request.", _flatten(exc.detail), status.HTTP_400_BAD_REQUEST)
    response = exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.APIException):
        detail = exc.detail
        message = str(detail) if not isinstance(detail, dict | list) else "Request failed."
        headers = {
            k: v for k, v in response.headers.items() if k in {"Retry-After", "WWW-Authenticate"}
        }
        return _error(message, None, response.status_code, headers)
    return response
