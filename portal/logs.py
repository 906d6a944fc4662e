"""Structured logs: who and what each log line is about, and the JSON formatter's settings.

With ``LOG_FORMAT=json`` every line is one JSON object (python-json-logger): ``time``,
``level``, ``logger``, ``message``, and where they apply ``request_id``, ``user``, ``job_id``
and ``cluster``. Those four come from context variables set once per request
(:class:`RequestContextMiddleware`) or per Celery task (``config.celery``), and are copied onto
every record by :class:`ContextFilter`, so no call site has to pass them. A field given with
``extra=`` on the call wins over the context.

Each request also gets one access line (logger ``portal.requests``: method, path, status,
milliseconds) carrying the same fields, and its ``X-Request-ID`` (the caller's, when it is a
sane one, else a new one) is sent back, so a user's report can be matched to the log.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.http import HttpRequest, HttpResponse

__all__ = [
    "CONTEXT_FIELDS",
    "ContextFilter",
    "RequestContextMiddleware",
    "log_context",
    "task_context",
]

CONTEXT_FIELDS = ("request_id", "user", "job_id", "cluster")
_vars: dict[str, contextvars.ContextVar[str | None]] = {
    name: contextvars.ContextVar(f"gpupool_log_{name}", default=None) for name in CONTEXT_FIELDS
}
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
# URL keyword arguments that name what a request is about.
_JOB_KWARGS = ("job_id",)
_CLUSTER_KWARGS = {"cluster-detail", "cluster-test", "cluster-state", "cluster-delete"}

access_log = logging.getLogger("portal.requests")


class ContextFilter(logging.Filter):
    """Copies the context's fields onto each record (never over a field the call passed)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in _vars.items():
            value = var.get()
            if value is not None and not hasattr(record, name):
                setattr(record, name, value)
        return True


@contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Set some of ``request_id``, ``user``, ``job_id``, ``cluster`` for the block's log lines."""
    tokens = [
        (_vars[name], _vars[name].set(str(value)))
        for name, value in fields.items()
        if value not in (None, "")
    ]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def task_context(
    run: Callable[..., Any], args: tuple[Any, ...] | None, kwargs: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The log fields of a Celery task's call: the ``job_id`` and ``cluster_id`` it was given,
    found by the names of the task function's parameters (``evict_job(7)`` is job 7,
    ``reconcile_cluster(7)`` cluster 7)."""
    try:
        bound = inspect.signature(run).bind_partial(*(args or ()), **(kwargs or {}))
    except (TypeError, ValueError):  # a call that does not fit: Celery will say so
        return {}
    fields: dict[str, Any] = {}
    if bound.arguments.get("job_id") is not None:
        fields["job_id"] = bound.arguments["job_id"]
    if bound.arguments.get("cluster_id") is not None:
        fields["cluster"] = bound.arguments["cluster_id"]
    return fields


class RequestContextMiddleware:
    """Sets the request id, then (once authentication ran) the user and the job or cluster the
    URL names, for every log line of the request; writes the access line at the end."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get("X-Request-ID", "")
        request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        started = time.monotonic()
        token = _vars["request_id"].set(request_id)
        others = [(var, var.set(None)) for name, var in _vars.items() if name != "request_id"]
        try:
            response = self.get_response(request)
            response["X-Request-ID"] = request_id
            # A token-authenticated API call names its user only once DRF's view ran.
            user = _vars["user"].get() or _username(request)
            if user:
                _vars["user"].set(user)
            access_log.info(
                "%s %s %s %.0f ms",
                request.method,
                request.path,
                response.status_code,
                (time.monotonic() - started) * 1000,
                extra={
                    "method": request.method,
                    "path": request.path,
                    "status": response.status_code,
                },
            )
            return response
        finally:
            for var, tok in reversed(others):
                var.reset(tok)
            _vars["request_id"].reset(token)

    def process_view(
        self,
        request: HttpRequest,
        view: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        _vars["user"].set(_username(request))
        for name in _JOB_KWARGS:
            if kwargs.get(name):
                _vars["job_id"].set(str(kwargs[name]))
        match = request.resolver_match
        if match is not None and match.url_name in _CLUSTER_KWARGS and kwargs.get("name"):
            _vars["cluster"].set(str(kwargs["name"]))


def _username(request: HttpRequest) -> str | None:
    """The signed-in user's name, None for anonymous callers. Reading the user may need the
    database; while it is down the line goes without it (the request answers 503 anyway)."""
    user = getattr(request, "user", None)
    try:
        if user is not None and user.is_authenticated:
            return str(user.get_username())
    except Exception:  # an outage: the log line must not fail the request
        return None
    return None
