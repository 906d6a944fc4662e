"""A token that authenticated is remembered by the process for a few seconds
(``GPUPOOL_API_TOKEN_CACHE_SECONDS``): its next requests cost no look-up, and what would
refuse it still does: at once when the change is made in this process, within those seconds
when another process makes it, and its expiry on every request."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from portal.models import ApiToken
from portal.tokens import api_token_create

pytestmark = pytest.mark.django_db

TEAMS = "/api/v1/teams/"


def _client(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _token_queries(client: APIClient) -> int:
    with CaptureQueriesContext(connection) as seen:
        assert client.get(TEAMS).status_code == 200
    return sum('FROM "portal_apitoken"' in q["sql"] for q in seen.captured_queries)


def test_a_scripts_next_requests_do_not_look_its_token_up_again(bob):
    client = _client(api_token_create(user=bob, name="script")[1])
    assert _token_queries(client) == 1
    assert [_token_queries(client) for _ in range(3)] == [0, 0, 0]


def test_revoking_a_token_in_the_portal_refuses_it_from_the_next_request(bob):
    token, raw = api_token_create(user=bob, name="script")
    client = _client(raw)
    assert client.get(TEAMS).status_code == 200
    browser = APIClient()
    browser.force_login(bob)
    assert browser.post(f"/tokens/{token.pk}/revoke/").status_code in (302, 303)
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    assert client.get(TEAMS).status_code == 401


def test_deactivating_the_user_refuses_the_token_from_the_next_request(bob):
    client = _client(api_token_create(user=bob, name="script")[1])
    assert client.get(TEAMS).status_code == 200
    bob.is_active = False
    bob.save()
    assert client.get(TEAMS).status_code == 401


def test_a_revocation_by_another_process_applies_within_the_cache_seconds(bob, settings: Any):
    settings.GPUPOOL_API_TOKEN_CACHE_SECONDS = 1
    token, raw = api_token_create(user=bob, name="script")
    client = _client(raw)
    assert client.get(TEAMS).status_code == 200
    # What another web process does: one UPDATE, none of this process's signals.
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    get_user_model().objects.filter(pk=bob.pk).update(first_name="changed elsewhere")
    time.sleep(1.1)
    assert client.get(TEAMS).status_code == 401


def test_a_remembered_token_still_expires_on_time(bob):
    token, raw = api_token_create(user=bob, name="script")
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() + dt.timedelta(seconds=1))
    client = _client(raw)
    assert client.get(TEAMS).status_code == 200
    time.sleep(1.1)
    assert client.get(TEAMS).status_code == 401


def test_with_no_cache_seconds_every_request_looks_the_token_up(bob, settings: Any):
    settings.GPUPOOL_API_TOKEN_CACHE_SECONDS = 0
    client = _client(api_token_create(user=bob, name="script")[1])
    assert [_token_queries(client) for _ in range(3)] == [1, 1, 1]
