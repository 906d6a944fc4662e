"""Is a cluster's API URL safe to connect to? Checked before the portal opens any connection.

An admin types the URL (or it comes in an uploaded kubeconfig), and the portal then makes
requests to it with credentials, from inside the portal's network. A careless or hostile URL
could point those requests at the portal's own host or at a cloud metadata service, so:

* Only ``https://host[:port][/path]`` (a Prometheus URL, ``check_prometheus_url``, may also
  be ``http``): no other scheme, no user info, query or fragment,
  no percent-encoding, whitespace or backslashes, no IPv6 zone ids. Hostnames must be plain
  ASCII DNS names (IDNs in their ``xn--`` form).
* IPv4 literals must be canonical dotted quads. ``127.1``, ``0x7f.0.0.1``, ``0177.0.0.1``
  and ``2130706433`` all reach 127.0.0.1 through the C resolver's ``inet_aton`` rules; they
  are refused rather than interpreted. IPv6 literals carrying an IPv4 address (mapped
  ``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4
  ``2002::/16``, Teredo) are judged by the IPv4 address they carry as well.
* Every address the hostname resolves to is checked, not only the first. The resolver is
  injected, so tests need no DNS.

Address classes, and what this module does with them:

=====================  ===========================================  =========================
class                  examples                                     verdict
=====================  ===========================================  =========================
cloud metadata         169.254.169.254, fd00:ec2::254,              always refused
                       100.100.100.200, 168.63.129.16
unusable               0.0.0.0/8, ::, multicast, broadcast,         always refused
                       240.0.0.0/4, other reserved ranges
loopback, link-local   127.0.0.0/8, ::1, 169.254.0.0/16, fe80::/10  refused unless
                                                                    ``allow_local`` (the demo
                                                                    and tests run kubesim on
                                                                    loopback)
private                10/8, 172.16/12, 192.168/16, 100.64/10,      allowed unless
                       198.18/15, fc00::/7, 64:ff9b:1::/48          ``allow_private=False``;
                                                                    with it, only inside
                                                                    ``allow_networks``
public                 everything else                              allowed
=====================  ===========================================  =========================

Private ranges are allowed by default because that is where on-premises clusters live; a
portal that only ever talks to public managed clusters can switch them off. Team webhooks
(``notifications.channels``) switch them off and open only the networks the operator lists:
a team admin is not trusted with the portal's internal network the way a platform admin is.
An allow-list never opens a metadata, unusable, loopback or link-local address.

This is a check at registration and before connecting, not a pin: DNS can change between
the check and the connection (rebinding). The adapter should run the check again right
before it builds a client, and keep timeouts short.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "IPNetwork",
    "Resolver",
    "UnresolvableHostError",
    "UnsafeUrlError",
    "check_api_url",
    "check_prometheus_url",
    "classify_address",
    "normalize_api_url",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[..., Sequence[tuple[Any, ...]]]


class UnsafeUrlError(ValueError):
    """The URL must not be used to reach a cluster; the message says why, in words."""


class UnresolvableHostError(UnsafeUrlError):
    """The host name does not resolve (so "unreachable" rather than "refused")."""


def _nets(*cidrs: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OCI, OpenStack, DigitalOcean instance metadata
        "169.254.170.2",  # AWS ECS task metadata and credentials
        "169.254.169.253",  # AWS VPC DNS resolver
        "169.254.0.23",  # Tencent Cloud metadata
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::253",  # AWS VPC DNS over IPv6
        "fd20:ce::254",  # GCP metadata over IPv6
        "100.100.100.200",  # Alibaba Cloud metadata
        "168.63.129.16",  # Azure WireServer (a public address, reachable only from inside)
        "192.0.0.192",  # Oracle Cloud Classic metadata
    )
)
METADATA_HOSTNAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)

LOCAL_NETWORKS = _nets("127.0.0.0/8", "::1/128", "169.254.0.0/16", "fe80::/10")
UNUSABLE_NETWORKS = _nets(
    "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches the local host on Linux
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, and 255.255.255.255 broadcast
    "192.0.0.0/24",  # IETF protocol assignments
    "::/128",  # unspecified
    "::/96",  # IPv4-compatible (deprecated); the embedded address is judged too
    "100::/64",  # discard-only
    "ff00::/8",  # multicast
    "fec0::/10",  # site-local (deprecated)
)
PRIVATE_NETWORKS = _nets(
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",  # carrier-grade NAT, also used inside some clouds
    "198.18.0.0/15",  # benchmarking, seen on lab networks
    "fc00::/7",  # unique local
    "64:ff9b:1::/48",  # local-use NAT64 (RFC 8215): translated to whatever the site chose
)
NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")

_HOST_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_NUMERIC_LOOKING = re.compile(r"(0x[0-9a-f]*|[0-9]+)")

# Verdicts, most severe first.
METADATA, UNUSABLE, LOCAL, PRIVATE, PUBLIC = "metadata", "unusable", "local", "private", "public"
_SEVERITY = {METADATA: 0, UNUSABLE: 1, LOCAL: 2, PRIVATE: 3, PUBLIC: 4}
_REASONS = {
    METADATA: "is a cloud metadata address",
    UNUSABLE: "is not a usable unicast address",
    LOCAL: "is a loopback or link-local address (allowed only where the operator setting "
    "GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS permits local clusters)",
    PRIVATE: "is a private address and private cluster addresses are switched off "
    "(GPUPOOL_ALLOW_PRIVATE_CLUSTER_URLS)",
}


def _classify_one(address: IPAddress) -> str:
    if address in METADATA_ADDRESSES:
        return METADATA
    if any(address in net for net in LOCAL_NETWORKS if net.version == address.version):
        return LOCAL
    if any(address in net for net in UNUSABLE_NETWORKS if net.version == address.version):
        return UNUSABLE
    if any(address in net for net in PRIVATE_NETWORKS if net.version == address.version):
        return PRIVATE
    if address.is_multicast or address.is_unspecified or address.is_reserved:
        return UNUSABLE
    return PUBLIC


def _reached(address: IPAddress) -> IPAddress:
    """The address a connection to ``address`` reaches: the IPv4 one for an IPv4-mapped or a
    NAT64 spelling, else the address itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in NAT64_PREFIX:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def classify_address(address: IPAddress) -> str:
    """``metadata``, ``unusable``, ``local``, ``private`` or ``public``.

    An IPv4-mapped (``::ffff:a.b.c.d``) or NAT64 (``64:ff9b::a.b.c.d``) address is judged
    as the IPv4 address it reaches. A 6to4 or Teredo address gets the more severe of its own
    verdict and that of the IPv4 addresses it carries.
    """
    reached = _reached(address)
    if reached is not address:
        return _classify_one(reached)
    verdicts = [_classify_one(address)]
    if isinstance(address, ipaddress.IPv6Address):
        if address.sixtofour is not None:
            verdicts.append(_classify_one(address.sixtofour))
        if address.teredo is not None:
            verdicts.extend(_classify_one(v4) for v4 in address.teredo)
    return min(verdicts, key=_SEVERITY.__getitem__)


def _judge(
    address: IPAddress,
    shown: str,
    *,
    allow_local: bool,
    allow_private: bool,
    allow_networks: Sequence[IPNetwork],
    reasons: Mapping[str, str],
) -> None:
    verdict = classify_address(address)
    if verdict == PUBLIC:
        return
    if verdict == PRIVATE and (allow_private or _listed(address, allow_networks)):
        return
    if verdict == LOCAL and allow_local:
        return
    raise UnsafeUrlError(f"{shown} {reasons.get(verdict) or _REASONS[verdict]}")


def _listed(address: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    """Whether an allow-list covers the address; a mapped or NAT64 spelling is looked up as
    the IPv4 address it reaches (an IPv6 entry such as ``::/0`` does not open IPv4 space)."""
    reached = _reached(address)
    return any(reached in net for net in networks if net.version == reached.version)


def _parse_host(host: str) -> tuple[str, IPAddress | None]:
    """The host in canonical form, and its address when it is an IP literal."""
    if host.startswith("["):
        if not host.endswith("]"):
            raise UnsafeUrlError("the IPv6 address is missing its closing bracket")
        literal = host[1:-1]
        if "%" in literal:
            raise UnsafeUrlError("IPv6 zone ids are not allowed in a cluster URL")
        try:
            v6 = ipaddress.IPv6Address(literal)
        except ValueError:
            raise UnsafeUrlError(f"{literal!r} is not a valid IPv6 address") from None
        return f"[{v6.compressed}]", v6
    if not host.isascii():
        raise UnsafeUrlError("the host name must be ASCII; write an international name as xn--…")
    host = host.lower().removesuffix(".")
    labels = host.split(".")
    if _NUMERIC_LOOKING.fullmatch(labels[-1]):
        # A name whose last label is numeric is an IPv4 literal to the C resolver, in
        # whatever base and shorthand it is written; accept only the canonical form.
        try:
            v4 = ipaddress.IPv4Address(host)
        except ValueError:
            raise UnsafeUrlError(
                f"{host!r} is not a canonical IPv4 address (write it as four decimal numbers)"
            ) from None
        if str(v4) != host:
            raise UnsafeUrlError(f"{host!r} is not a canonical IPv4 address")
        return host, v4
    if len(host) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise UnsafeUrlError(f"{host!r} is not a valid host name")
    return host, None


_DEFAULT_PORTS = {"https": 443, "http": 80}


def normalize_api_url(
    url: str, *, what: str = "the cluster URL", schemes: tuple[str, ...] = ("https",)
) -> str:
    """The URL in canonical form, after the checks that need no DNS. Raises UnsafeUrlError.

    ``what`` names the URL in the messages; ``schemes`` are those allowed (a cluster's API:
    https only).
    """
    if not isinstance(url, str) or not url:
        raise UnsafeUrlError(f"{what} is empty")
    if len(url) > 2048:
        raise UnsafeUrlError(f"{what} is too long")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise UnsafeUrlError(f"{what} contains whitespace or control characters")
    if "\\" in url:
        raise UnsafeUrlError(f"{what} contains a backslash")
    if "%" in url:
        raise UnsafeUrlError(f"{what} must not be percent-encoded")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise UnsafeUrlError(f"{what} cannot be parsed: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        raise UnsafeUrlError(f"{what} must use {' or '.join(schemes)}, not {scheme or 'none'}")
    if not url.lower().startswith(f"{scheme}://"):
        raise UnsafeUrlError(f"{what} must start with {scheme}://")
    if "@" in parts.netloc:
        raise UnsafeUrlError(f"{what} must not contain a user name or password")
    if parts.query or url.endswith("?"):
        raise UnsafeUrlError(f"{what} must not have a query string")
    if parts.fragment or "#" in url:
        raise UnsafeUrlError(f"{what} must not have a fragment")
    netloc = parts.netloc
    if not netloc:
        raise UnsafeUrlError(f"{what} has no host")
    host_part, port_text = netloc, ""
    if netloc.startswith("["):
        close = netloc.find("]")
        if close == -1:
            raise UnsafeUrlError("the IPv6 address is missing its closing bracket")
        host_part, rest = netloc[: close + 1], netloc[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise UnsafeUrlError("unexpected text after the IPv6 address")
            port_text = rest[1:]
    elif ":" in netloc:
        host_part, _, port_text = netloc.rpartition(":")
        if ":" in host_part:
            raise UnsafeUrlError("an IPv6 address must be written in brackets")
    if not host_part:
        raise UnsafeUrlError(f"{what} has no host")
    host, _ = _parse_host(host_part)
    port = ""
    if port_text or netloc.endswith(":"):
        if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
            raise UnsafeUrlError(f"{port_text!r} is not a valid port")
        if int(port_text) != _DEFAULT_PORTS[scheme]:
            port = f":{int(port_text)}"
    path = parts.path.rstrip("/")
    if any(segment in (".", "..") for segment in path.split("/")):
        raise UnsafeUrlError(f"{what} path must not contain . or .. segments")
    return f"{scheme}://{host}{port}{path}"


def check_api_url(
    url: str,
    *,
    allow_local: bool = False,
    allow_private: bool = True,
    allow_networks: Sequence[IPNetwork] = (),
    resolve: Resolver = socket.getaddrinfo,
    what: str = "the cluster URL",
    schemes: tuple[str, ...] = ("https",),
    reasons: Mapping[str, str] | None = None,
    show_resolved: bool = True,
) -> str:
    """The normalized URL, if the portal may connect to it; else UnsafeUrlError saying why.

    ``allow_local`` admits loopback and link-local addresses (the operator setting that lets
    the demo and tests reach kubesim on 127.0.0.1; off in production). ``allow_private``
    admits RFC 1918, CGNAT and unique-local addresses, where on-premises clusters live;
    without it, ``allow_networks`` admits the private addresses inside those networks only.
    Cloud metadata and unusable addresses are refused whatever the settings.

    ``reasons`` replaces the words of a verdict (``LOCAL``, ``PRIVATE``), so that a caller
    names its own operator settings. ``show_resolved=False`` keeps the address a host name
    resolved to out of the message: one who may not reach the internal network should not
    learn its addresses from the refusal either.

    ``resolve`` has ``socket.getaddrinfo``'s signature and is called for host names only.
    """
    judge = functools.partial(
        _judge,
        allow_local=allow_local,
        allow_private=allow_private,
        allow_networks=tuple(allow_networks),
        reasons=dict(reasons or {}),
    )
    normalized = normalize_api_url(url, what=what, schemes=schemes)
    scheme, _, rest = normalized.partition("://")
    netloc = rest.partition("/")[0]
    host, address = _parse_host(netloc.rpartition(":")[0] if _has_port(netloc) else netloc)
    if address is not None:
        judge(address, str(address))
        return normalized
    if host in METADATA_HOSTNAMES:
        raise UnsafeUrlError(f"{host} is a cloud metadata host")
    port = int(netloc.rpartition(":")[2]) if _has_port(netloc) else _DEFAULT_PORTS[scheme]
    try:
        results = resolve(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UnresolvableHostError(f"{host} does not resolve ({exc})") from None
    if not results:
        raise UnresolvableHostError(f"{host} does not resolve to any address")
    for result in results:
        raw = str(result[4][0])
        try:
            resolved = ipaddress.ip_address(raw.partition("%")[0])
        except ValueError:
            raise UnsafeUrlError(f"{host} resolved to {raw!r}, which is not an address") from None
        shown = (
            f"{host} resolves to {resolved}, which"
            if show_resolved
            else f"{host} resolves to an address that"
        )
        judge(resolved, shown)
    return normalized


def check_prometheus_url(
    url: str,
    *,
    allow_local: bool = False,
    allow_private: bool = True,
    resolve: Resolver = socket.getaddrinfo,
) -> str:
    """A cluster's Prometheus base URL, if the portal may query it; else UnsafeUrlError.

    The API URL's guard, at registration and before every collection alike: the portal asks
    it from inside its own network, so the same address classes are refused. Prometheus often
    listens on plain http inside a cluster's network, so http is accepted too; the URL may
    carry no credentials either way.
    """
    return check_api_url(
        url,
        allow_local=allow_local,
        allow_private=allow_private,
        resolve=resolve,
        what="the Prometheus URL",
        schemes=("http", "https"),
    )


def _has_port(netloc: str) -> bool:
    return netloc.rfind(":") > netloc.rfind("]")
