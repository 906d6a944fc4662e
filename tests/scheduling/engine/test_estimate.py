"""The start estimate: pure, from running jobs' max runtime and the model's wait history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.engine.estimate import Release, WaitHistory, estimate_start

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
QUEUED = NOW - timedelta(minutes=30)
DAY = timedelta(hours=24)


def releases(*spec: tuple[int, int]) -> list[Release]:
    """(GPUs, minutes from now until max runtime) per running job."""
    return [Release(gpus=g, by=NOW + timedelta(minutes=m)) for g, m in spec]


def history(median_min: float, jobs: int) -> WaitHistory:
    return WaitHistory(median=timedelta(minutes=median_min), jobs=jobs, window=DAY)


@pytest.mark.parametrize(
    ("need", "available", "running", "waits", "source", "at_minutes"),
    [
        # 1 free, jobs of 2 and 4 GPUs end at +60 and +20: 1 + 4 = 5 ≥ 4 at +20.
        (4, 1, [(2, 60), (4, 20)], None, "runtime", 20),
        # The one that ends first is too small: both are needed, the later one decides.
        (6, 1, [(2, 10), (4, 90)], history(5, 10), "runtime", 90),
        # A job already past its max runtime (still stopping): free now, not in the past.
        (2, 0, [(2, -5)], None, "runtime", 0),
        # Never enough GPUs even when all end: the median wait decides.
        (16, 0, [(2, 10)], history(120, 8), "history", 90),
        # Enough GPUs free in number (fragmented): the runtime basis says nothing; history.
        (4, 6, [(8, 30)], history(60, 5), "history", 30),
        # Waited longer than the median and nothing frees enough: no estimate.
        (16, 0, [], history(10, 8), "none", None),
        # Too few recent waits to count and no runtime basis: no estimate.
        (16, 0, [], history(600, 2), "none", None),
        (16, 0, [], None, "none", None),
    ],
    ids=[
        "the soonest releases that cover the need",
        "a later release completes the need",
        "an overdue job counts as freeing now",
        "too few GPUs in the pool: the median wait",
        "enough free but fragmented: the median wait",
        "waited past the median: no estimate",
        "two waits are no history",
        "nothing at all",
    ],
)
def test_estimate(need, available, running, waits, source, at_minutes):
    est = estimate_start(
        now=NOW,
        queued_at=QUEUED,
        need=need,
        label="a100-80gb",
        available=available,
        releases=releases(*running),
        history=waits,
    )
    assert est.source == source
    if at_minutes is None:
        assert est.at is None
    else:
        assert est.at == NOW + timedelta(minutes=at_minutes)
    assert "a100-80gb" in est.basis


def test_the_runtime_basis_says_what_it_counts_and_that_jobs_ahead_may_take_them():
    est = estimate_start(
        now=NOW,
        queued_at=QUEUED,
        need=4,
        label="a100-80gb",
        available=1,
        releases=releases((4, 20)),
        history=history(45, 12),
    )
    assert "max runtime by 2026-12-04 12:20 UTC" in est.basis
    assert "frees the 4 a100-80gb GPUs it needs (1 free now)" in est.basis
    assert "jobs ahead in line" in est.basis
    assert "median wait on a100-80gb 45m over 12 jobs" in est.basis


def test_a_quota_bound_estimate_counts_the_team_quota():
    est = estimate_start(
        now=NOW,
        queued_at=QUEUED,
        need=4,
        label="t4",
        available=0,
        releases=releases((4, 50)),
        history=None,
        quota=True,
    )
    assert est.at == NOW + timedelta(minutes=50)
    assert "of its team's t4 quota" in est.basis and "of its team on t4" in est.basis


def test_the_history_estimate_counts_from_when_the_job_was_queued():
    est = estimate_start(
        now=NOW,
        queued_at=QUEUED,
        need=64,
        label="h100",
        available=0,
        releases=(),
        history=history(50, 4),
    )
    assert est.at == QUEUED + timedelta(minutes=50)
    assert "median wait on h100 50m over 4 jobs in the last 1 day" in est.basis
    assert "counted from when it was queued" in est.basis
