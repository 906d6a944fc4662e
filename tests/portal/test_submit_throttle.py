"""The submit throttle against the real Redis: exact under parallel submits, and its
Retry-After says when the next submit goes through (``portal/api/throttles.py``)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from portal.api.throttles import SubmitThrottle
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _request(user: Any) -> Request:
    request = Request(APIRequestFactory().post("/api/v1/jobs/"))
    request.user = user
    return request


def test_parallel_submits_pass_exactly_the_rate(settings):
    settings.GPUPOOL_SUBMIT_RATE = "5/min"
    user = UserFactory()
    barrier = threading.Barrier(16)
    allowed: list[bool] = []

    def submit() -> None:
        barrier.wait()
        allowed.append(SubmitThrottle().allow_request(_request(user), None))

    threads = [threading.Thread(target=submit) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(allowed) == [False] * 11 + [True] * 5


def test_retry_after_is_when_the_next_submit_goes_through_and_refusals_do_not_push_it(settings):
    settings.GPUPOOL_SUBMIT_RATE = "3/s"
    user = UserFactory()
    time.sleep(1 - time.time() % 1)  # start at a window's start: the window is the whole second
    assert [SubmitThrottle().allow_request(_request(user), None) for _ in range(3)] == [True] * 3
    refused = SubmitThrottle()
    assert not refused.allow_request(_request(user), None)
    for _ in range(10):  # hammering while refused counts nothing
        assert not SubmitThrottle().allow_request(_request(user), None)
    wait = refused.wait()
    assert wait is not None and 1 <= wait <= 2
    time.sleep(wait)
    assert SubmitThrottle().allow_request(_request(user), None)


def test_users_and_anonymous_addresses_have_budgets_of_their_own(settings):
    settings.GPUPOOL_SUBMIT_RATE = "1/min"
    alice, bob = UserFactory(), UserFactory()
    assert SubmitThrottle().allow_request(_request(alice), None)
    assert not SubmitThrottle().allow_request(_request(alice), None)
    assert SubmitThrottle().allow_request(_request(bob), None)
    assert SubmitThrottle().allow_request(_request(AnonymousUser()), None)
    assert not SubmitThrottle().allow_request(_request(AnonymousUser()), None)
