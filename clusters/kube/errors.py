"""Every failure of a call as a :class:`KubeError`: in words, with whether trying again may
help and whether the request certainly never reached the API server. The client's
``ApiException`` and urllib3's transport errors are translated here, once; no message ever
contains a credential.
"""

from __future__ import annotations

import json
import time
from email.utils import parsedate_to_datetime
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class KubeError(Exception):
    """A failed call, in words. ``kind``: unreachable, tls, timeout, auth, api.

    ``status`` is the HTTP status (None when no response came back), ``reason`` the
    Kubernetes Status reason (``AlreadyExists``, ``NotFound``, ``Forbidden`` …),
    ``retry_after`` the server's Retry-After in seconds, ``unsent`` whether the request
    certainly never reached the API server (see :attr:`changed_nothing`).
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str = "api",
        status: int | None = None,
        reason: str = "",
        retry_after: float | None = None,
        unsent: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        self.unsent = unsent

    @property
    def changed_nothing(self) -> bool:
        """Whether the request certainly changed nothing on the cluster: it never reached the
        API server (host name unresolved, no connection made, the server's TLS certificate
        refused in the handshake), or the server refused it with a 4xx other than 409 (which
        names an object that does exist). A read timeout, a connection reset after sending or
        a 5xx prove nothing: a create may have been applied all the same."""
        if self.unsent:
            return True
        return self.status is not None and 400 <= self.status < 500 and self.status != 409

    @property
    def transient(self) -> bool:
        """Whether the same request may succeed later (network trouble, overload, 5xx)."""
        if self.kind in ("unreachable", "timeout"):
            return True
        return self.status in TRANSIENT_STATUSES

    @property
    def cluster_unreachable(self) -> bool:
        """Whether the request failed for the cluster's sake, not the request's: refused,
        unresolvable, a TLS handshake refused, no answer in time, or the portal's own
        credentials refused (401). Every request to the cluster fails alike until it is back
        (or an admin fixes its registration), so a job waits for it instead of failing."""
        return self.kind in ("unreachable", "tls", "timeout") or self.status == 401

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410


def _retry_after(headers: Any) -> float | None:
    if not headers:
        return None
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _api_error(exc: ApiException, what: str) -> KubeError:
    status = exc.status or None
    if not status:
        # The client turns TLS failures into ApiException(status=0).
        text = str(exc.reason or "")
        if "CERTIFICATE_VERIFY_FAILED" in text or "certificate" in text.lower():
            return KubeError(
                f"{what}: the API server's TLS certificate is not signed by the registered CA "
                "(or does not name this host)",
                kind="tls",
                unsent=True,  # refused in the handshake, before any request was written
            )
        return KubeError(f"{what}: TLS handshake failed", kind="tls")
    reason, message = "", ""
    try:
        body = json.loads(exc.body or "")
        if isinstance(body, dict):
            reason = str(body.get("reason") or "")
            message = str(body.get("message") or "")
    except (TypeError, ValueError):
        pass
    if status == 401:
        return KubeError(
            f"{what}: 401 Unauthorized: the API server does not accept the credentials "
            "(expired or revoked token, or a certificate from another CA)",
            kind="auth",
            status=401,
            reason=reason or "Unauthorized",
        )
    text = message or str(exc.reason or "") or f"HTTP {status}"
    return KubeError(
        f"{what}: {status} {reason or exc.reason or ''}: {text}".replace("  ", " "),
        kind="auth" if status == 403 else "api",
        status=status,
        reason=reason,
        retry_after=_retry_after(exc.headers),
    )


def _status_message(status: int, content_type: str, data: bytes) -> str:
    """The message of a Kubernetes ``Status`` error body, "" for anything else."""
    if status < 400 or "json" not in content_type:
        return ""
    try:
        body = json.loads(data)
    except ValueError:
        return ""
    if isinstance(body, dict) and body.get("kind") == "Status" and body.get("apiVersion") == "v1":
        return str(body.get("message") or body.get("reason") or f"HTTP {status}")
    return ""


def _transport_error(exc: Exception, what: str) -> KubeError:
    inner: BaseException = exc
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        inner = exc.reason
    if isinstance(inner, urllib3.exceptions.SSLError):
        text = str(inner)
        if "CERTIFICATE_VERIFY_FAILED" in text or "match" in text.lower():
            return KubeError(
                f"{what}: the API server's TLS certificate is not signed by the registered CA "
                "(or does not name this host)",
                kind="tls",
                unsent=True,  # refused in the handshake, before any request was written
            )
        return KubeError(f"{what}: TLS handshake failed", kind="tls")
    if isinstance(inner, urllib3.exceptions.NameResolutionError):
        return KubeError(
            f"{what}: the API server's host name does not resolve (DNS)",
            kind="unreachable",
            unsent=True,
        )
    # NewConnectionError subclasses ConnectTimeoutError in urllib3 2: test it first.
    if isinstance(inner, urllib3.exceptions.NewConnectionError | ConnectionError):
        # No connection made: nothing sent. A connection reset (another ConnectionError) may
        # come after the request was written.
        unsent = isinstance(inner, urllib3.exceptions.NewConnectionError | ConnectionRefusedError)
        return KubeError(
            f"{what}: the API server is unreachable (connection refused or no route)",
            kind="unreachable",
            unsent=unsent,
        )
    if isinstance(inner, urllib3.exceptions.TimeoutError):
        return KubeError(
            f"{what}: the API server did not answer in time",
            kind="timeout",
            unsent=isinstance(inner, urllib3.exceptions.ConnectTimeoutError),
        )
    return KubeError(f"{what}: the connection to the API server failed", kind="unreachable")
