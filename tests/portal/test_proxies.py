"""Forwarded headers are believed only from configured proxies (``GPUPOOL_TRUSTED_PROXIES``)."""

from __future__ import annotations

import pytest
from django.test import RequestFactory

from portal.proxies import client_address

pytestmark = pytest.mark.django_db


@pytest.fixture
def https_only(settings):
    """What DEBUG=false switches on: HTTP is redirected to HTTPS."""
    settings.SECURE_SSL_REDIRECT = True


def test_a_clients_x_forwarded_proto_does_not_make_http_secure(client, https_only):
    response = client.get("/login/", REMOTE_ADDR="198.51.100.7", HTTP_X_FORWARDED_PROTO="https")
    assert response.status_code == 301
    assert response["Location"].startswith("https://")


def test_a_trusted_proxys_x_forwarded_proto_is_believed(client, https_only, settings):
    settings.GPUPOOL_TRUSTED_PROXIES = ["10.0.0.0/24"]
    via_proxy = client.get("/login/", REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_PROTO="https")
    assert via_proxy.status_code == 200
    from_elsewhere = client.get("/login/", REMOTE_ADDR="10.0.1.5", HTTP_X_FORWARDED_PROTO="https")
    assert from_elsewhere.status_code == 301


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        ("198.51.100.7", "203.0.113.1", "198.51.100.7"),  # not a proxy: its header is ignored
        ("10.0.0.5", "203.0.113.1", "203.0.113.1"),
        ("10.0.0.5", "1.2.3.4, 203.0.113.1", "203.0.113.1"),  # the left part is the client's
        ("10.0.0.5", "203.0.113.1, 10.0.0.9", "203.0.113.1"),  # two proxies in a row
        ("10.0.0.5", "", "10.0.0.5"),
        ("10.0.0.5", "not-an-address", "10.0.0.5"),
        ("10.0.0.5", "10.0.0.9", "10.0.0.5"),
    ],
    ids=[
        "untrusted peer",
        "one hop",
        "spoofed left",
        "two proxies",
        "none",
        "junk",
        "only proxies",
    ],
)
def test_the_client_address_is_read_from_the_right(settings, peer, forwarded, expected):
    settings.GPUPOOL_TRUSTED_PROXIES = ["10.0.0.0/24"]
    request = RequestFactory().get("/", REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR=forwarded)
    assert client_address(request) == expected


def test_a_malformed_proxy_setting_fails_at_start_up():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", "import django; from django.conf import settings; settings.DEBUG"],
        env={"DJANGO_SETTINGS_MODULE": "portal.settings", "GPUPOOL_TRUSTED_PROXIES": "10.0.0.0/33"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "GPUPOOL_TRUSTED_PROXIES: '10.0.0.0/33' is not a network" in result.stderr
