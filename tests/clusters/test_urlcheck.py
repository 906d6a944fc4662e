"""The API URL check: what a registered cluster's URL may point at, before any connection."""

from __future__ import annotations

import ast
import ipaddress
import socket
import sys
from pathlib import Path

import pytest

from clusters.urlcheck import (
    UnresolvableHostError,
    UnsafeUrlError,
    check_api_url,
    classify_address,
    normalize_api_url,
)


def resolver(table: dict[str, list[str]]):
    """A getaddrinfo stand-in that answers from ``table`` and records what it was asked."""
    asked: list[tuple[str, int]] = []

    def resolve(host, port, family=0, type=0, proto=0, flags=0):
        asked.append((host, port))
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        results = []
        for address in table[host]:
            if ":" in address:
                results.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0)))
            else:
                results.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)))
        return results

    resolve.asked = asked
    return resolve


def no_dns(*args, **kwargs):
    raise AssertionError("an IP literal must not be resolved")


# --- Normalization --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://k8s.example.org", "https://k8s.example.org"),
        ("https://k8s.example.org/", "https://k8s.example.org"),
        ("HTTPS://K8S.Example.ORG:6443/", "https://k8s.example.org:6443"),
        ("https://k8s.example.org:443", "https://k8s.example.org"),
        ("https://k8s.example.org.:6443", "https://k8s.example.org:6443"),
        (
            "https://rancher.example.org/k8s/clusters/c-m-x7z",
            "https://rancher.example.org/k8s/clusters/c-m-x7z",
        ),
        ("https://10.0.0.5:6443", "https://10.0.0.5:6443"),
        ("https://[2001:DB8:0:0::1]:6443", "https://[2001:db8::1]:6443"),
        ("https://xn--bcher-kva.example", "https://xn--bcher-kva.example"),
    ],
    ids=[
        "plain host",
        "trailing slash dropped",
        "scheme and host lower-cased",
        "default port dropped",
        "trailing dot dropped",
        "path prefix kept (Rancher)",
        "IPv4 literal",
        "IPv6 literal compressed",
        "punycode host",
    ],
)
def test_normalize_api_url(url, expected):
    assert normalize_api_url(url) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "empty"),
        ("http://k8s.example.org", "https, not http"),
        ("ftp://k8s.example.org", "https, not ftp"),
        ("file:///etc/passwd", "https, not file"),
        ("k8s.example.org:6443", "https"),
        ("//k8s.example.org", "https, not none"),
        ("https:k8s.example.org", "start with https://"),
        ("https://admin:secret@k8s.example.org", "user name or password"),
        ("https://token@k8s.example.org", "user name or password"),
        ("https://k8s.example.org?x=1", "query"),
        ("https://k8s.example.org/#frag", "fragment"),
        ("https://k8s.example.org/a b", "whitespace"),
        ("https://k8s.example.org\n.evil", "whitespace"),
        ("https://k8s.example.org\\@evil.example", "backslash"),
        ("https://k8s%2eexample.org", "percent"),
        ("https://", "no host"),
        ("https://:6443", "no host"),
        ("https://k8s.example.org:0", "not a valid port"),
        ("https://k8s.example.org:65536", "not a valid port"),
        ("https://k8s.example.org:https", "not a valid port"),
        ("https://k8s.example.org:", "not a valid port"),
        ("https://k8s.example.org:¹", "not a valid port"),  # isdigit(), but int() refuses it
        ("https://k8s.example.org:٦٤٤٣", "not a valid port"),  # Arabic-Indic 6443
        ("https://bücher.example", "ASCII"),
        ("https://under_score.example", "not a valid host name"),
        ("https://-lead.example", "not a valid host name"),
        ("https://a..b.example", "not a valid host name"),
        ("https://[fe80::1%25eth0]", "percent"),
        ("https://[::1", "cannot be parsed"),
        ("https://::1:6443", "brackets"),
        ("https://k8s.example.org/../admin", ". or .."),
    ],
)
def test_malformed_or_ambiguous_urls_are_refused(url, message):
    with pytest.raises(UnsafeUrlError, match=message):
        normalize_api_url(url)


@pytest.mark.parametrize(
    "host",
    [
        "127.1",
        "0x7f.0.0.1",
        "0x7f000001",
        "0177.0.0.1",
        "2130706433",
        "017700000001",
        "127.0.0.01",
        "10.1",
        "1.2.3.4.5",
        "256.1.1.1",
    ],
    ids=lambda h: h,
)
def test_non_canonical_ipv4_forms_are_refused_not_interpreted(host):
    with pytest.raises(UnsafeUrlError, match="canonical IPv4"):
        check_api_url(f"https://{host}:6443", allow_local=True, resolve=no_dns)


# --- Literal addresses ----------------------------------------------------------------------

ALWAYS_REFUSED = [
    ("169.254.169.254", "metadata"),
    ("169.254.170.2", "metadata"),
    ("[fd00:ec2::254]", "metadata"),
    ("[fd20:ce::254]", "metadata"),
    ("100.100.100.200", "metadata"),
    ("168.63.129.16", "metadata"),
    ("[::ffff:169.254.169.254]", "metadata"),
    ("[64:ff9b::a9fe:a9fe]", "metadata"),
    ("0.0.0.0", "not a usable"),
    ("0.1.2.3", "not a usable"),
    ("[::]", "not a usable"),
    ("224.0.0.1", "not a usable"),
    ("[ff02::1]", "not a usable"),
    ("255.255.255.255", "not a usable"),
    ("240.0.0.1", "not a usable"),
    ("[::7f00:1]", "not a usable"),  # IPv4-compatible ::127.0.0.1
]


@pytest.mark.parametrize(("host", "message"), ALWAYS_REFUSED, ids=[h for h, _ in ALWAYS_REFUSED])
@pytest.mark.parametrize("allow_local", [False, True], ids=["production", "local allowed"])
def test_metadata_and_unusable_addresses_are_refused_whatever_the_settings(
    host, message, allow_local
):
    with pytest.raises(UnsafeUrlError, match=message):
        check_api_url(f"https://{host}", allow_local=allow_local, resolve=no_dns)


LOCAL = [
    "127.0.0.1",
    "127.8.9.10",
    "[::1]",
    "169.254.1.1",
    "[fe80::1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[64:ff9b::7f00:1]",
    "[2002:7f00:1::]",
]


@pytest.mark.parametrize("host", LOCAL, ids=LOCAL)
def test_loopback_and_link_local_are_refused_in_production(host):
    with pytest.raises(UnsafeUrlError, match="loopback or link-local"):
        check_api_url(f"https://{host}:6443", resolve=no_dns)


@pytest.mark.parametrize("host", LOCAL, ids=LOCAL)
def test_loopback_and_link_local_are_allowed_by_the_operator_setting(host):
    assert check_api_url(f"https://{host}:6443", allow_local=True, resolve=no_dns).startswith(
        "https://"
    )


PRIVATE = [
    "10.0.0.1",
    "172.16.5.4",
    "172.31.255.254",
    "192.168.1.10",
    "100.64.0.1",
    "[fd12:3456::1]",
]


@pytest.mark.parametrize("host", PRIVATE, ids=PRIVATE)
def test_private_addresses_are_allowed_by_default_for_on_premises_clusters(host):
    assert check_api_url(f"https://{host}:6443", resolve=no_dns) == f"https://{host}:6443"


@pytest.mark.parametrize("host", PRIVATE, ids=PRIVATE)
def test_private_addresses_can_be_switched_off(host):
    with pytest.raises(UnsafeUrlError, match="private"):
        check_api_url(f"https://{host}:6443", allow_private=False, resolve=no_dns)


@pytest.mark.parametrize(
    "host",
    ["8.8.8.8", "172.32.0.1", "[2001:4860:4860::8888]", "[64:ff9b::808:808]", "[::ffff:8.8.8.8]"],
)
def test_public_addresses_are_allowed(host):
    assert check_api_url(f"https://{host}", allow_private=False, resolve=no_dns)


# --- Host names: every resolved address counts -----------------------------------------------


def test_a_host_name_is_resolved_with_its_port_and_every_address_checked():
    resolve = resolver({"k8s.example.org": ["203.0.113.10", "2001:db8::10"]})

    assert check_api_url("https://k8s.example.org:6443/", resolve=resolve) == (
        "https://k8s.example.org:6443"
    )
    assert resolve.asked == [("k8s.example.org", 6443)]


def test_the_default_port_is_resolved_as_443():
    resolve = resolver({"k8s.example.org": ["203.0.113.10"]})

    check_api_url("https://k8s.example.org", resolve=resolve)

    assert resolve.asked == [("k8s.example.org", 443)]


@pytest.mark.parametrize(
    ("addresses", "message"),
    [
        (["203.0.113.10", "127.0.0.1"], "resolves to 127.0.0.1, which is a loopback"),
        (["169.254.169.254"], "resolves to 169.254.169.254, which is a cloud metadata"),
        (["::ffff:169.254.169.254"], "metadata"),
        (["fe80::1%eth0"], "loopback or link-local"),
        (["0.0.0.0"], "not a usable"),
    ],
    ids=[
        "one bad address among good ones",
        "metadata",
        "mapped metadata",
        "scoped link-local",
        "zero",
    ],
)
def test_a_host_name_resolving_to_a_refused_address_is_refused(addresses, message):
    resolve = resolver({"sneaky.example.org": addresses})

    with pytest.raises(UnsafeUrlError, match=message):
        check_api_url("https://sneaky.example.org", resolve=resolve)


def test_localhost_works_only_with_the_local_setting():
    resolve = resolver({"localhost": ["127.0.0.1", "::1"]})

    with pytest.raises(UnsafeUrlError, match="loopback"):
        check_api_url("https://localhost:8443", resolve=resolve)
    assert check_api_url("https://localhost:8443", allow_local=True, resolve=resolve) == (
        "https://localhost:8443"
    )


def test_a_private_resolution_obeys_allow_private():
    resolve = resolver({"k8s.corp": ["10.20.30.40"]})

    assert check_api_url("https://k8s.corp", resolve=resolve) == "https://k8s.corp"
    with pytest.raises(UnsafeUrlError, match="private"):
        check_api_url("https://k8s.corp", allow_private=False, resolve=resolve)


@pytest.mark.parametrize("host", ["metadata.google.internal", "metadata", "instance-data"])
def test_metadata_host_names_are_refused_without_asking_dns(host):
    with pytest.raises(UnsafeUrlError, match="metadata host"):
        check_api_url(f"https://{host}", allow_local=True, resolve=no_dns)


def test_a_host_that_does_not_resolve_is_reported_as_unresolvable():
    with pytest.raises(UnresolvableHostError, match="does not resolve"):
        check_api_url("https://nowhere.example.org", resolve=resolver({}))


def test_an_empty_resolution_is_unresolvable():
    with pytest.raises(UnresolvableHostError, match="any address"):
        check_api_url("https://empty.example.org", resolve=lambda *a, **k: [])


def test_unresolvable_is_still_a_refusal():
    assert issubclass(UnresolvableHostError, UnsafeUrlError)
    assert issubclass(UnsafeUrlError, ValueError)


# --- The classifier -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "verdict"),
    [
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("127.0.0.1", "local"),
        ("fe80::abcd", "local"),
        ("10.1.2.3", "private"),
        ("fc00::1", "private"),
        ("0.0.0.0", "unusable"),
        ("ff05::2", "unusable"),
        ("1.1.1.1", "public"),
        ("2606:4700::1111", "public"),
        ("2002:0a00:0001::", "private"),  # 6to4 around 10.0.0.1
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "public"),  # Teredo, public server/client
    ],
)
def test_classify_address(address, verdict):
    assert classify_address(ipaddress.ip_address(address)) == verdict


def test_the_url_check_imports_the_standard_library_only():
    tree = ast.parse((Path(__file__).resolve().parents[2] / "clusters" / "urlcheck.py").read_text())
    imported = {
        node.module.partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    } | {
        alias.name.partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }

    assert imported - {"__future__"} <= sys.stdlib_module_names
