"""The estimate records: a job's first estimate is kept while its range moves, and the
calibration buckets the starts by their actual wait."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from dashboards.estimates import estimate_calibration, estimate_ranges, estimates_record
from dashboards.models import StartEstimateRecord
from portal.jobs.blocker import StartRange
from portal.models import JobState
from scheduling.estimates import Estimate
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

M = dt.timedelta(minutes=1)


def test_the_first_estimate_stays_while_the_range_moves(bob, vision):
    now = timezone.now()
    job = JobFactory(team=vision, owner=bob, state=JobState.QUEUED)
    unestimated = JobFactory(team=vision, owner=bob, state=JobState.QUEUED)
    first = Estimate(now + 30 * M, "a100", "east", "why", now + 20 * M, now + 50 * M, 12)
    assert estimates_record({job.pk: first, unestimated.pk: Estimate(None, "", "", "no")}, now) == 1
    assert estimates_record({job.pk: first}, now) == 0  # nothing moved: nothing written
    later = Estimate(now + 60 * M, "a100", "east", "why", now + 40 * M, now + 90 * M, 13, True)
    assert estimates_record({job.pk: later}, now + 5 * M) == 1
    record = StartEstimateRecord.objects.get(job=job)
    assert (record.first_at, record.first_earliest, record.first_latest, record.first_runs) == (
        now + 30 * M,
        now + 20 * M,
        now + 50 * M,
        12,
    )
    assert estimate_ranges([job.pk, unestimated.pk]) == {
        job.pk: StartRange(now + 40 * M, now + 90 * M, 13, True)
    }


def test_calibration_buckets_starts_by_their_actual_wait(bob, vision):
    now = timezone.now()
    for wait, error, inside in ((5, 2, True), (30, 20, False), (120, 10, True)):
        submitted = now - dt.timedelta(hours=3)
        started = submitted + wait * M
        job = JobFactory(
            team=vision,
            owner=bob,
            state=JobState.RUNNING,
            submitted_at=submitted,
            admitted_at=started,
            started_at=started,
        )
        at = started - error * M
        StartEstimateRecord.objects.create(
            job=job,
            first_at=at,
            first_earliest=at - 5 * M if inside else at - 2 * M,
            first_latest=at + 30 * M if inside else at + 2 * M,
            first_made_at=submitted,
            updated_at=submitted,
        )
    estimates_record({}, now)  # marks each record with its job's admission
    rows = {r.bucket: r for r in estimate_calibration(now=now)}
    assert rows["under 10 min"].starts == 1 and rows["under 10 min"].inside == 1.0
    assert rows["10 min to 1 h"].median_error_seconds == 20 * 60
    assert rows["10 min to 1 h"].inside == 0.0
    assert rows["1 to 6 h"].starts == 1 and rows["over 6 h"].starts == 0
    every = rows["every start"]
    assert every.starts == 3 and every.median_error_seconds == 10 * 60
    assert every.inside == pytest.approx(2 / 3) and every.early == 0


def test_the_calibration_api_is_for_platform_admins(api_as, bob, root):
    assert api_as(bob).get("/api/v1/estimates/calibration/").status_code == 403
    rows = api_as(root).get("/api/v1/estimates/calibration/").json()
    assert [r["bucket"] for r in rows][-1] == "every start"
    assert rows[-1] == {
        "bucket": "every start",
        "starts": 0,
        "median_error_seconds": None,
        "p90_error_seconds": None,
        "inside": None,
        "early": 0,
    }
