"""While Redis is down a submit still commits (201); while PostgreSQL is down every request
gets a 503 with Retry-After (JSON from the API, a short "try again" page for pages), never a
500.

"Down" is real here: the cache, the broker or the database connection points at a loopback
port where nothing listens, so every connection attempt is refused, as while the server
restarts. The test's own data is written before the outage and checked after it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client

from portal.models import Job, JobState
from portal.tokens import api_token_create
from tests.clusters.conftest import app_publishing_to
from tests.conftest import job_body

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/jobs/"


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: connections to it are refused


@pytest.fixture
def redis_down(settings: Any) -> Iterator[str]:
    """The cache and the broker on a port nothing listens on (Redis restarting)."""
    url = f"redis://127.0.0.1:{_dead_port()}"
    settings.CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"{url}/1",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
        }
    }
    settings.DJANGO_REDIS_IGNORE_EXCEPTIONS = True
    with app_publishing_to(f"{url}/0", "nowhere"):
        yield url
    cache.close()


@contextmanager
def database_down() -> Iterator[None]:
    """Every new database connection of this process is refused until the block ends."""
    saved = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = _dead_port()
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["PORT"] = saved


def _token_client(user: Any) -> Client:
    _, raw = api_token_create(user=user, name="outage")
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}", HTTP_ACCEPT="application/json")


# ---------------------------------------------------------------------------------------------
# Redis down
# ---------------------------------------------------------------------------------------------
def test_a_submit_commits_and_answers_201_while_redis_is_down(bob, catalog, redis_down):
    response = _token_client(bob).post(URL, job_body(), content_type="application/json")
    assert response.status_code == 201, response.content[:500]
    job = Job.objects.get(public_id=response.json()["id"])
    assert job.state == JobState.QUEUED  # the row is the outbox: beat's next cycle admits it


def test_the_submit_throttle_still_counts_while_redis_is_down(bob, catalog, redis_down, settings):
    settings.GPUPOOL_SUBMIT_RATE = "2/min"
    client = _token_client(bob)
    codes = [
        client.post(URL, job_body(name=f"j{i}"), content_type="application/json").status_code
        for i in range(3)
    ]
    assert codes == [201, 201, 429]
    assert Job.objects.count() == 2


def test_pages_and_lists_work_while_redis_is_down(bob, catalog, redis_down):
    client = Client()
    client.force_login(bob)
    assert client.get("/jobs/").status_code == 200
    assert client.get(URL, HTTP_ACCEPT="application/json").status_code == 200


# ---------------------------------------------------------------------------------------------
# PostgreSQL down
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [URL, "/api/v1/teams/", "/api/v1/queue/"])
def test_the_api_answers_a_json_503_with_retry_after_while_the_database_is_down(bob, path):
    client = _token_client(bob)
    with database_down():
        response = client.get(path)
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert int(response["Retry-After"]) > 0
    body = response.json()
    assert "Try again" in body["message"]
    assert body["extra"] == {"fields": {}}


def test_a_submit_while_the_database_is_down_is_a_503_and_stores_nothing(bob, catalog):
    client = _token_client(bob)
    with database_down():
        response = client.post(URL, job_body(), content_type="application/json")
    assert response.status_code == 503
    assert response["Retry-After"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize("path", ["/", "/jobs/", "/queue/", "/login/"])
def test_a_page_is_a_friendly_try_again_page_while_the_database_is_down(bob, path):
    client = Client()
    if path == "/login/":  # anonymous: the form posts and the password check needs the database
        with database_down():
            response = client.post(path, {"username": "bob", "password": "x"})
    else:
        client.force_login(bob)
        with database_down():
            response = client.get(path)
    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/html")
    assert int(response["Retry-After"]) > 0
    text = response.content.decode()
    assert "back in a moment" in text and "Try again" in text
