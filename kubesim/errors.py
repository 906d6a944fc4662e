"""API errors as Kubernetes ``Status`` objects.

Every failure the server returns goes through :class:`ApiError`, so the body always has the
shape the official client (and client-go) decode: ``kind: Status``, ``reason``, ``code``,
``details``. The constructors mirror ``k8s.io/apimachinery/pkg/api/errors`` so the portal can
branch on ``reason`` exactly as it would against a real cluster.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error response: HTTP code, Status reason, message and optional details/headers."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        """The ``Status`` object sent as the response body (or inside a watch ERROR event)."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(name: str | None, group: str, kind: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"kind": kind}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details.update(extra)
    return details


def qualified(resource: str, group: str) -> str:
    """``jobs.batch.volcano.sh`` or plain ``pods``: how the apiserver names a resource."""
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> ApiError:
    """404 for a named object that does not exist."""
    return ApiError(
        404,
        "NotFound",
        f'{qualified(resource, group)} "{name}" not found',
        details=_details(name, group, resource),
    )


def already_exists(resource: str, group: str, name: str) -> ApiError:
    """409 for a create whose name is taken."""
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(resource, group)} "{name}" already exists',
        details=_details(name, group, resource),
    )


def conflict(resource: str, group: str, name: str, why: str | None = None) -> ApiError:
    """409 for an optimistic-concurrency failure (stale resourceVersion, apply conflict)."""
    why = why or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
        details=_details(name, group, resource),
    )


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 with one cause per failing field, formatted like ``field.ErrorList``."""
    texts = [cause["message"] for cause in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{kind}{"." + group if group else ""} "{name}" is invalid: {joined}',
        details=_details(name, group, kind, causes=causes),
    )


def bad_request(message: str) -> ApiError:
    """400 for malformed input (bad selector, undecodable body, webhook denial)."""
    return ApiError(400, "BadRequest", message)


def unauthorized() -> ApiError:
    """401 for a missing or unknown bearer token."""
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(
    user: str, verb: str, resource: str, group: str, namespace: str | None, name: str | None
) -> ApiError:
    """403 in RBAC's words, naming user, verb, resource, group and scope."""
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    base = resource.split("/")[0]
    subject = qualified(base, group) + (f' "{name}"' if name else "")
    return ApiError(
        403,
        "Forbidden",
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{group}" {where}',
        details=_details(name, group, base),
    )


def method_not_allowed() -> ApiError:
    """405 for a verb the resource does not support."""
    return ApiError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
    )


def gone(message: str) -> ApiError:
    """410 for an expired resourceVersion or continue token."""
    return ApiError(410, "Expired", message)


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    """415 for a patch type the resource cannot take (strategic merge on a CRD)."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(accepted)}",
        details=_details(None, "", content_type),
    )


def too_many_requests(retry_after: int | None) -> ApiError:
    """429 with ``Retry-After``, as API priority and fairness sends it."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    details = {"retryAfterSeconds": retry_after} if retry_after is not None else None
    return ApiError(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        details=details,
        headers=headers,
    )


def from_code(code: int, message: str | None = None, retry_after: int | None = None) -> ApiError:
    """An error for an arbitrary status code, used by fault injection."""
    if code == 429:
        err = too_many_requests(retry_after)
        if message:
            err.message = message
        return err
    reasons = {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        409: "Conflict",
        410: "Expired",
        422: "Invalid",
        500: "InternalError",
        503: "ServiceUnavailable",
        504: "Timeout",
    }
    default_messages = {
        500: "Internal error occurred: kubesim injected fault",
        503: "the server is currently unable to handle the request",
        504: "the server was unable to return a response in the time allotted",
    }
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return ApiError(
        code,
        reasons.get(code, "Unknown"),
        message or default_messages.get(code, f"kubesim injected fault ({code})"),
        headers=headers,
    )
