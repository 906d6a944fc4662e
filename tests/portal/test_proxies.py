"""Forwarded headers are believed only from configured proxies (``GPUPOOL_TRUSTED_PROXIES``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from django.test import RequestFactory

from portal.proxies import client_address
from tests.clusters.conftest import TEST_KEYS, _database_url
from tests.ports import HOST, gunicorn_running

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

    result = subprocess.run(
        [sys.executable, "-c", "import django; from django.conf import settings; settings.DEBUG"],
        env={"DJANGO_SETTINGS_MODULE": "config.settings", "GPUPOOL_TRUSTED_PROXIES": "10.0.0.0/33"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "GPUPOOL_TRUSTED_PROXIES: '10.0.0.0/33' is not a network" in result.stderr


# ---------------------------------------------------------------------------------------------
# gunicorn itself: it reads the scheme from X-Forwarded-Ssl / -Proto / -Protocol before Django
# sees the request, from the peers in its forwarded_allow_ips (gunicorn.conf.py)
# ---------------------------------------------------------------------------------------------
@contextmanager
def _gunicorn(trusted: str, log_path: Path) -> Iterator[str]:
    """The portal under gunicorn as deployed (its config file from the repo's root), HTTPS
    required (DEBUG off), trusting ``trusted`` as proxies; the base URL."""
    env = {
        **os.environ,
        "DEBUG": "false",
        "SECURE_SSL_REDIRECT": "true",
        "ALLOWED_HOSTS": f"{HOST},localhost",
        "SECRET_KEY": "gunicorn-forwarded-headers-test-key-0123456789abcdef",
        "GPUPOOL_TRUSTED_PROXIES": trusted,
        "GPUPOOL_SECRET_KEYS": ",".join(TEST_KEYS),
        "DATABASE_URL": _database_url(),  # the test's database: the page reads the session
        "DB_CONN_MAX_AGE": "0",
    }
    with gunicorn_running(env, log_path) as url:
        yield url


@pytest.mark.parametrize(
    "header",
    [("X-Forwarded-Ssl", "on"), ("X-Forwarded-Proto", "https"), ("X-Forwarded-Protocol", "ssl")],
)
def test_gunicorn_believes_no_forwarded_scheme_from_an_unlisted_local_peer(header, tmp_path):
    with _gunicorn(trusted="", log_path=tmp_path / "gunicorn.log") as url:
        response = requests.get(
            f"{url}/api/v1/jobs/", headers=dict([header]), allow_redirects=False
        )
    assert response.status_code == 301
    assert response.headers["Location"].startswith("https://")


def test_gunicorn_believes_a_listed_proxys_forwarded_scheme(tmp_path):
    with _gunicorn(trusted=HOST, log_path=tmp_path / "gunicorn.log") as url:
        response = requests.get(
            f"{url}/api/v1/jobs/", headers={"X-Forwarded-Ssl": "on"}, allow_redirects=False
        )
    assert response.status_code in (401, 403)  # served over "HTTPS": asks who you are
