"""How to reach one cluster (:class:`Connection`), and the two things a client keeps beside
it: a client certificate in an anonymous in-memory file (never on disk), and a projected
service-account token re-read when the kubelet rotates it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from clusters.kube.errors import KubeError


class RateLimiter(Protocol):
    def acquire(self) -> float: ...


class _NoLimit:
    def acquire(self) -> float:
        return 0.0


@dataclass(frozen=True)
class Connection:
    """How to reach one cluster. Secrets are left out of ``repr``."""

    name: str
    url: str
    ca_pem: str
    token: str | None = field(default=None, repr=False)
    client_cert_pem: str | None = field(default=None, repr=False)
    client_key_pem: str | None = field(default=None, repr=False)
    tls_server_name: str | None = None
    timeout: float = 10.0
    creates_in_flight: int = 16
    # The cluster the portal runs in: its service-account token, read from this file (the
    # kubelet rotates it; see :class:`_TokenFile`).
    token_file: str | None = None


def _memfd_pem(pem: str) -> tuple[int, str]:
    """An anonymous in-memory file holding ``pem``: (fd, a path ``ssl`` can open)."""
    if not hasattr(os, "memfd_create"):
        raise KubeError(
            "client-certificate authentication needs Linux (memfd_create) so the key never "
            "touches disk; register the cluster with a service-account token instead",
            kind="auth",
        )
    fd = os.memfd_create("gpupool-client-cert", os.MFD_CLOEXEC)
    os.write(fd, pem.encode("ascii"))
    return fd, f"/proc/self/fd/{fd}"


class _TokenFile:
    """A projected service-account token: the kubelet replaces the file before the token
    expires (about hourly), so the client re-reads it whenever the file changed, checked with
    one ``stat`` before each request (the client's ``refresh_api_key_hook``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None

    def read(self) -> str:
        try:
            st = os.stat(self.path)
            with open(self.path, encoding="ascii") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise KubeError(
                f"the service-account token cannot be read: {exc.__class__.__name__}", kind="auth"
            ) from None
        self._seen = (st.st_mtime_ns, st.st_ino)
        return token

    def refresh(self, cfg: Any) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            return  # keep the token in hand; the API server says when it stops working
        if (st.st_mtime_ns, st.st_ino) != self._seen:
            cfg.api_key["authorization"] = self.read()
