"""Failed API token attempts are limited per client address and per token prefix, apart; a
valid token is never refused by either.

A token reads ``gpp_<8 lookup chars><43 secret chars>``. A bad token whose lookup prefix no
stored token has counts against the caller's address; a wrong secret for a prefix that exists
counts against that prefix too. Past ``GPUPOOL_API_AUTH_FAILURE_RATE`` a failed attempt is a
JSON 429 with ``Retry-After`` naming the limit, while the right token goes through: one caller
behind a shared NAT, or someone who knows a token's prefix, locks no one out.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from portal.api.auth import FAILURES_KEY, token_failure_record
from portal.models import ApiToken
from portal.tokens import api_token_create, api_token_revoke

pytestmark = pytest.mark.django_db

TEAMS = "/api/v1/teams/"
NAT = "203.0.113.5"  # one address for a whole office behind a NAT


def _client(address: str, token: str) -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _wrong_secret(raw: str) -> str:
    """The same lookup prefix (first 12 characters) with another secret."""
    return raw[:12] + ("A" if raw[12] != "A" else "B") + raw[13:]


def _unknown(n: int = 0) -> str:
    return f"gpp_guess{n:03d}" + "x" * 43


@pytest.fixture
def rate(settings: Any) -> None:
    """3 failures a minute. The limiter counts in fixed minutes (``portal.api.auth``), so a
    test begins with 10 s or more left in the current one: its few attempts all fall in one
    period, as the counts it asserts assume."""
    settings.GPUPOOL_API_AUTH_FAILURE_RATE = "3/min"
    left = 60 - time.time() % 60
    if left < 10:
        time.sleep(left + 0.05)


def test_failed_attempts_from_one_address_get_a_json_429_naming_the_address(bob, rate):
    guesser = _client(NAT, _unknown())
    assert [guesser.get(TEAMS).status_code for _ in range(3)] == [401] * 3
    limited = guesser.get(TEAMS)
    assert limited.status_code == 429
    assert 1 <= int(limited["Retry-After"]) <= 60
    body = limited.json()
    assert body["message"].startswith("Too many failed API token attempts from your address.")
    assert "this API token" not in body["message"]
    assert body["extra"] == {"fields": {}}
    assert _client("203.0.113.6", _unknown(1)).get(TEAMS).status_code == 401  # elsewhere: not


def test_a_valid_token_behind_the_same_nat_is_not_locked_out_by_a_guesser(bob, rate):
    _token, raw = api_token_create(user=bob, name="script")
    guesser = _client(NAT, _unknown())
    for _ in range(5):
        guesser.get(TEAMS)
    assert guesser.get(TEAMS).status_code == 429
    colleague = _client(NAT, raw)
    assert colleague.get(TEAMS).status_code == 200
    assert colleague.post("/api/v1/jobs/", {}, format="json").status_code == 400  # not 429
    assert guesser.get(TEAMS).status_code == 429  # the guesser still waits


def test_wrong_secrets_for_a_known_prefix_count_against_that_token_from_any_address(bob, rate):
    _token, raw = api_token_create(user=bob, name="script")
    wrong = _wrong_secret(raw)
    codes = [_client(f"198.51.100.{i}", wrong).get(TEAMS).status_code for i in range(4)]
    assert codes == [401, 401, 401, 429]  # four addresses, each under its own limit
    limited = _client("198.51.100.9", wrong).get(TEAMS)
    assert limited.status_code == 429
    assert 1 <= int(limited["Retry-After"]) <= 60
    assert limited.json()["message"].startswith("Too many failed attempts with this API token.")
    # The owner is not locked out, from any address; other tokens are not limited.
    assert _client("198.51.100.9", raw).get(TEAMS).status_code == 200
    assert _client("192.0.2.1", raw).get(TEAMS).status_code == 200
    _other, other_raw = api_token_create(user=bob, name="laptop")
    assert _client("198.51.100.9", _wrong_secret(other_raw)).get(TEAMS).status_code == 401


def test_a_429_names_both_limits_when_both_are_past(bob, rate):
    _token, raw = api_token_create(user=bob, name="script")
    client = _client(NAT, _wrong_secret(raw))
    assert [client.get(TEAMS).status_code for _ in range(4)] == [401, 401, 401, 429]
    message = client.get(TEAMS).json()["message"]
    assert message.startswith(
        "Too many failed API token attempts from your address and with this API token."
    )


def test_unknown_prefixes_count_against_the_address_only(bob, rate):
    _token, raw = api_token_create(user=bob, name="script")
    for i in range(5):
        _client(NAT, _unknown(i)).get(TEAMS)
    # No counter was made for the prefixes guessed: a scan cannot fill the cache with keys.
    assert not _token_keys()
    # and a real prefix has not been charged for the address's failures
    assert _client("192.0.2.1", _wrong_secret(raw)).get(TEAMS).status_code == 401


def _token_keys() -> list[str]:
    if not hasattr(cache, "keys"):
        pytest.skip("listing keys needs django-redis")
    return list(cache.keys(f"{FAILURES_KEY}:token:*"))


def test_an_expired_or_revoked_tokens_own_secret_is_not_counted(bob, rate):
    token, raw = api_token_create(user=bob, name="old")
    api_token_revoke(token=token)
    client = _client(NAT, raw)
    assert [client.get(TEAMS).status_code for _ in range(5)] == [401] * 5
    assert client.get(TEAMS).json()["message"] == "Invalid, expired or revoked API token."
    assert _client(NAT, _unknown()).get(TEAMS).status_code == 401  # the address is untouched


def test_a_valid_token_costs_one_query_and_no_cache_round_trip(bob, rate, settings):
    """The success path reads no counter: a Redis connection of its own, named, shows which
    command it ran last, and a valid token's request leaves it unchanged. (Not remembered
    between requests here: the look-up is what is counted.)"""
    settings.GPUPOOL_API_TOKEN_CACHE_SECONDS = 0
    cache_settings = settings.CACHES["default"]
    if not cache_settings["BACKEND"].startswith("django_redis."):
        pytest.skip("watches a Redis connection")
    _token, raw = api_token_create(user=bob, name="script")
    name = "gpupool-token-probe"
    location = cache_settings["LOCATION"]
    location = location[0] if isinstance(location, list | tuple) else location
    # A pool of its own (django-redis keeps one per URL), whose connections carry the name.
    named = f"{location}{'&' if '?' in location else '?'}client_name={name}"
    settings.CACHES = {"default": {**cache_settings, "LOCATION": named}}
    try:
        for i in range(5):  # the address is over its limit
            _client(NAT, _unknown(i)).get(TEAMS)
        valid = _client(NAT, raw)
        valid.get(TEAMS)  # its first use is recorded; within a minute the next one is not
        cache.set("probe", 1)  # the connection's last command is now a SET
        with CaptureQueriesContext(connection) as queries:
            assert valid.get(TEAMS).status_code == 200
        token_queries = [q for q in queries.captured_queries if ApiToken._meta.db_table in q["sql"]]
        assert len(token_queries) == 1  # the look-up
        assert _last_commands(location, name) == ["set"]
    finally:
        cache.close()


def _last_commands(location: str, client_name: str) -> list[str]:
    """The last command of each connection named ``client_name``, asked over another one."""
    import redis

    with redis.Redis.from_url(location) as watcher:
        return [c["cmd"] for c in watcher.client_list() if c.get("name") == client_name]


def test_the_token_failure_limit_ends_with_its_period(settings):
    settings.GPUPOOL_API_AUTH_FAILURE_RATE = "2/min"
    start = 1_800_000_000.0  # the start of a minute
    assert token_failure_record("198.51.100.4", now=start + 10) is None
    assert token_failure_record("198.51.100.4", now=start + 12) is None
    limited = token_failure_record("198.51.100.4", now=start + 15)
    assert limited is not None and (limited.wait, limited.over) == (45, ("address",))
    assert token_failure_record("198.51.100.4", now=start + 61) is None
    assert token_failure_record("198.51.100.9", now=start + 15) is None
    token = [token_failure_record(f"192.0.2.{i}", "gpp_abcdefgh", now=start + 5) for i in range(3)]
    assert token[:2] == [None, None] and token[2] is not None and token[2].over == ("token",)


def test_a_prefix_past_its_limit_is_logged_once_a_period(bob, rate, caplog):
    _token, raw = api_token_create(user=bob, name="script")
    with caplog.at_level(logging.WARNING, logger="portal.api.auth"):
        for i in range(6):
            _client(f"198.51.100.{i}", _wrong_secret(raw)).get(TEAMS)
    warned = [r for r in caplog.records if "failed attempts this period" in r.getMessage()]
    assert len(warned) == 1
    assert raw[:12] in warned[0].getMessage() and raw[12:] not in warned[0].getMessage()
