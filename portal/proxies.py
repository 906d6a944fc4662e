"""Who is calling: the peer, or the client that a configured reverse proxy forwards for.

``X-Forwarded-Proto`` and ``X-Forwarded-For`` are only as true as whoever set them. Any client
can send them, so they are believed only from the addresses in ``GPUPOOL_TRUSTED_PROXIES``
(the portal's own reverse proxies), and dropped from every other request before anything reads
them: Django's HTTPS detection (``SECURE_PROXY_SSL_HEADER``: the SSL redirect, secure cookies,
CSRF's referer check), the login lockout's per-address count, the API token failure limit and
``/metrics``' network check all see the same client.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Sequence

from django.conf import settings
from django.http import HttpRequest, HttpResponse

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# Every header a proxy uses to say the client's scheme or address (gunicorn reads the Ssl and
# Protocol spellings itself, gunicorn.conf.py); dropped together from an untrusted peer.
FORWARDED_HEADERS = (
    "HTTP_X_FORWARDED_PROTO",
    "HTTP_X_FORWARDED_FOR",
    "HTTP_X_FORWARDED_SSL",
    "HTTP_X_FORWARDED_PROTOCOL",
    "HTTP_X_FORWARDED_HOST",
    "HTTP_FORWARDED",
)


@functools.cache
def _networks(configured: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(n.strip(), strict=False) for n in configured if n.strip())


def _parse(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(address.strip().partition("%")[0])
    except ValueError:
        return None


def is_trusted_proxy(address: str, proxies: Sequence[str] | None = None) -> bool:
    """Whether ``address`` is one of the configured reverse proxies."""
    parsed = _parse(address)
    if parsed is None:
        return False
    configured = tuple(settings.GPUPOOL_TRUSTED_PROXIES if proxies is None else proxies)
    return any(parsed in net for net in _networks(configured) if net.version == parsed.version)


def client_address(request: HttpRequest) -> str:
    """The caller's address: the peer, unless the peer is a trusted proxy, then the nearest
    address in ``X-Forwarded-For`` that is not one (read from the right, the end the proxies
    append to; what a client wrote on the left is never believed past an untrusted hop)."""
    peer = str(request.META.get("REMOTE_ADDR", ""))
    if not is_trusted_proxy(peer):
        return peer
    hops = [h.strip() for h in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",")]
    for hop in reversed([h for h in hops if h]):
        if _parse(hop) is None:
            return peer  # a hop the proxy would never write: trust nothing beyond it
        if not is_trusted_proxy(hop):
            return hop
    return peer


class TrustedProxyMiddleware:
    """Drop the forwarded headers (``X-Forwarded-Proto``, ``-For``, ``-Ssl`` …) unless the peer
    is a trusted proxy.

    First in ``MIDDLEWARE``: the security middleware decides on the SSL redirect from the
    scheme, and must not take a client's word for it.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not is_trusted_proxy(str(request.META.get("REMOTE_ADDR", ""))):
            for header in FORWARDED_HEADERS:
                request.META.pop(header, None)
        return self.get_response(request)
