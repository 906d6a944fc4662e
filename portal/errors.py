"""Errors that services raise and the API / pages turn into responses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import get_template


class ApplicationError(Exception):
    """A request the user can fix; ``fields`` names the offending fields when there are any."""

    status = 400

    def __init__(self, message: str, *, fields: Mapping[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fields = dict(fields or {})


class NotFound(ApplicationError):
    """Missing, or belonging to a team the caller is not in: the two look the same on purpose."""

    status = 404


class Forbidden(ApplicationError):
    """The caller can see the object but their role does not allow the action."""

    status = 403


class Conflict(ApplicationError):
    """The object's current state does not allow the action (e.g. cancelling a finished job)."""

    status = 409


class TooManyQueued(ApplicationError):
    """A submit that would take a team's queue, or one member's share of it, past its limit of
    QUEUED jobs. 429, not 409: the request is fine and nothing about the job conflicts; the
    caller has asked for too much at once and may ask again once queued jobs start or are
    cancelled. No Retry-After: when a place frees is the scheduler's to know, not ours.
    """

    status = 429


# --- One error shape, for the API and for pages ----------------------------------------------


def error_body(message: str, fields: Mapping[str, list[str]] | None = None) -> dict[str, Any]:
    """The API's error shape: ``{"message": …, "extra": {"fields": {name: [..]}}}``."""
    return {"message": message, "extra": {"fields": dict(fields or {})}}


def is_api_request(request: HttpRequest) -> bool:
    """Whether the caller reads JSON: everything under ``/api/`` (the schema and docs too)."""
    return request.path_info.startswith("/api/")


def error_response(
    request: HttpRequest,
    status: int,
    message: str,
    fields: Mapping[str, list[str]] | None = None,
) -> HttpResponse:
    """An error in the caller's language: the API's JSON shape under ``/api/``, a plain page
    elsewhere.

    The page is rendered without the request's context on purpose: it is what a request gets
    when its session cookie, its body or its URL could not be read, so it must not look at the
    session, the user or the CSRF token again.
    """
    if is_api_request(request):
        return JsonResponse(
            error_body(message, fields), status=status, json_dumps_params={"separators": (",", ":")}
        )
    context = {"title": _TITLES.get(status, "Error"), "message": message, "fields": fields or {}}
    page = get_template("error.html").render(context)
    return HttpResponse(page, status=status)


_TITLES = {
    400: "Bad request",
    403: "Not allowed",
    404: "Not found",
    413: "Request too large",
    500: "Something went wrong",
}


def too_large_message(exc: Exception) -> str | None:
    """What a 413 says for one of Django's request-size refusals, naming the limit; None for
    any other exception."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return (
            f"The request body is larger than the limit of {limit:,} bytes ({limit / 2**20:g} MiB)."
        )
    if isinstance(exc, TooManyFieldsSent):
        return f"The request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS:,} fields."
    if isinstance(exc, TooManyFilesSent):
        return f"The request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FILES:,} files."
    return None


# --- Django's error views (``handler400`` … in ``config/urls.py``) ------------------------------
# What a request gets when the error happens outside a DRF view: a URL that matches no route, a
# body Django refuses to read, an exception in a page. JSON under /api/, the plain page elsewhere.


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    too_large = too_large_message(exception) if exception is not None else None
    if too_large is not None:
        return error_response(request, 413, too_large)
    return error_response(request, 400, "The request could not be read.")


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, 403, "You do not have permission to do this.")


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, 404, "Not found.")


def server_error(request: HttpRequest) -> HttpResponse:
    return error_response(
        request, 500, "Something went wrong on our side; it has been logged. Please try again."
    )
