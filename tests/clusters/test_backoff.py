"""Dispatch backoff: exponential, jittered, capped, and never under the server's Retry-After."""

from __future__ import annotations

import random

import pytest

from clusters.outcome import MAX_BACKOFF_SECONDS, MAX_RETRY_AFTER_SECONDS, backoff_seconds


@pytest.fixture(autouse=True)
def _one_second_base(settings):
    settings.GPUPOOL_DISPATCH_BACKOFF_MS = 1000


@pytest.mark.parametrize(
    ("attempt", "ceiling"), [(1, 1), (2, 2), (3, 4), (4, 8), (7, 60), (30, 60)]
)
def test_each_attempt_waits_between_half_and_all_of_a_doubling_ceiling(attempt, ceiling):
    random.seed(attempt)
    delays = [backoff_seconds(attempt) for _ in range(200)]
    assert all(ceiling / 2 <= d <= ceiling for d in delays)
    assert max(delays) - min(delays) > ceiling / 4  # jittered: workers do not retry in step


def test_the_ceiling_is_the_cap_however_many_attempts():
    assert max(backoff_seconds(100) for _ in range(100)) <= MAX_BACKOFF_SECONDS


def test_retry_after_is_a_floor_even_on_the_first_attempt():
    delays = [backoff_seconds(1, retry_after=5) for _ in range(100)]
    assert all(5 <= d <= 5.5 for d in delays)


def test_a_short_retry_after_does_not_shorten_the_backoff():
    assert all(backoff_seconds(4, retry_after=1) >= 4 for _ in range(100))


def test_an_absurd_retry_after_is_capped():
    """A proxy answering "come back tomorrow" must not park a job for a day, nor outlast the
    broker's visibility timeout (a countdown task redelivered is a second retry chain)."""
    delay = backoff_seconds(1, retry_after=86_400)
    assert MAX_RETRY_AFTER_SECONDS <= delay <= MAX_RETRY_AFTER_SECONDS + 0.5 < 3600
