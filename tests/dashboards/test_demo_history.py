"""The demo starts with a past (issue 32): ``seed_demo_history`` writes a week of finished jobs
of the demo teams with their timelines, the usage ledger they add up to, their queue waits and
the hourly series, once; the usage page, fair share's ledger and the start estimates' runtimes
then have something to show."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db.models import Sum
from django.utils import timezone

from dashboards.models import HourRun, QueueWait, TeamHour
from portal.models import Job, JobEvent, JobState
from scheduling.estimates import duration_model
from scheduling.models import UsageRecord
from scheduling.usage import usage_account

pytestmark = pytest.mark.django_db


def test_the_demo_starts_with_a_week_of_finished_jobs_usage_and_series(client):
    call_command("seed_demo", stdout=io.StringIO())
    out = io.StringIO()
    call_command("seed_demo_history", stdout=out)
    jobs = Job.objects.filter(state__in=(JobState.SUCCEEDED, JobState.FAILED))
    n = jobs.count()
    assert f"Demo history: {n} finished jobs over the last 7 days" in out.getvalue()
    assert n >= 50
    assert set(jobs.values_list("team__slug", flat=True)) == {"vision", "language", "robotics"}
    now = timezone.now()
    assert jobs.filter(finished_at__lt=now - dt.timedelta(minutes=5)).count() == n
    assert jobs.filter(submitted_at__gte=now - dt.timedelta(days=7)).count() == n
    # each job's timeline, its queue wait, and the ledger its runs add up to
    assert JobEvent.objects.filter(to_state=JobState.RUNNING).count() == n
    assert QueueWait.objects.count() == n
    ran = sum(j.total_gpus * (j.finished_at - j.started_at).total_seconds() / 3600 for j in jobs)
    assert UsageRecord.objects.aggregate(s=Sum("gpu_hours"))["s"] == pytest.approx(ran)
    assert usage_account(now=now) == 0  # already in the ledger: never charged twice
    assert HourRun.objects.exists() and TeamHour.objects.exists()
    # runtimes to learn from, per name pattern
    assert duration_model(now=now) is not None
    # the usage page of a demo member shows GPU-hours
    client.force_login(get_user_model().objects.get(username="bob"))
    page = client.get("/usage/").content.decode()
    assert "a100-80gb" in page
    # seeded once
    again = io.StringIO()
    call_command("seed_demo_history", stdout=again)
    assert again.getvalue() == "" and Job.objects.count() == n
