"""The request and response the API speaks, and the small helpers every verb shares.

Apart from :mod:`kubesim.api.core` so that the verb modules and the HTTP server
(:mod:`kubesim.server`) can name a request, a response and a route without the handler.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote

from kubesim.store import ResourceType

JSON = "application/json"


@dataclass
class Request:
    """An HTTP request, already split into parts."""

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""
    cert_user: str | None = None
    """The CN of the client certificate the TLS handshake verified, if one was sent."""

    @classmethod
    def build(
        cls,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes,
        cert_user: str | None = None,
    ) -> Request:
        """Parse ``/path?query`` (last value of a repeated parameter wins)."""
        path, _, raw_query = target.partition("?")
        query = {k: v[-1] for k, v in parse_qs(raw_query, keep_blank_values=True).items()}
        return cls(method.upper(), unquote(path), query, headers, body, cert_user)


class StreamWriter:
    """What a streaming response may do with the connection."""

    def send(self, data: bytes) -> None:  # pragma: no cover - interface
        """Write one chunk; raises OSError when the client is gone."""
        raise NotImplementedError

    def gone(self) -> bool:  # pragma: no cover - interface
        """Whether the client closed the connection."""
        raise NotImplementedError


@dataclass
class Response:
    """A full body, or a ``stream`` callback that writes chunks itself."""

    status: int
    body: bytes = b""
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)
    stream: Callable[[StreamWriter], None] | None = None


@dataclass
class Route:
    """Where a path points."""

    kind: str  # version | health | discovery | resource | proxy | control | openapi | metrics
    rt: ResourceType | None = None
    namespace: str | None = None
    name: str | None = None
    sub: str | None = None
    parts: list[str] = field(default_factory=list)


_INT = re.compile(r"-?[0-9]{1,18}")


def _is_int(value: str) -> bool:
    """A whole number in ASCII digits (``str.isdigit`` also takes "¹", which ``int`` refuses)."""
    return _INT.fullmatch(value) is not None


def _true(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1", "yes")


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
