"""``gpupool show``, ``estimate`` and ``queue`` say a queued job's start as a likely range,
against a live portal (HTTP to pytest-django's ``live_server``)."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from django.utils import timezone

from portal.jobs.services import job_submit
from portal.models import JobState
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel, Quota
from scheduling.tasks import estimates_refresh_now
from tests.conftest import job_body
from tests.dashboards.conftest import kubesim_cluster  # noqa: F401  (fixture)
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

A100 = {"gpu_models": ["a100-80gb"], "min_gpu_memory_gib": None}


@pytest.fixture
def waiting(bob, vision, kubesim_cluster):  # noqa: F811
    """Two 8-GPU jobs fill kubesim's two 8-GPU A100 nodes, a third waits; 12 runs like them
    finished, about 40 minutes each."""
    kubesim_cluster("east")
    Quota.objects.create(team=vision, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=24)
    end = timezone.now() - dt.timedelta(hours=2)
    for i in range(12):
        JobFactory(
            team=vision,
            owner=bob,
            name=f"bert-{i}",
            state=JobState.SUCCEEDED,
            started_at=end - dt.timedelta(minutes=35 + i),
            finished_at=end,
        )
    jobs = [
        job_submit(
            user=bob, data=job_body(name=f"bert-{90 + i}", replicas=1, gpus_per_replica=8, **A100)
        ).job
        for i in range(3)
    ]
    assert len(run_cycle().admitted) == 2
    assert estimates_refresh_now() == 1
    return jobs[2]


def test_show_estimate_and_queue_say_a_range_with_its_comparable_runs(cli, bob, waiting):
    show = cli(bob, "show", waiting.name)
    assert show.exit_code == 0, show.output
    said = next(line for line in show.stdout.splitlines() if line.startswith("start estimate:"))
    assert "between " in said and "most likely" in said and "12 comparable runs" in said
    assert any(line.startswith("estimate basis:") for line in show.stdout.splitlines())
    assert "would start on:" in show.stdout and "a100-80gb" in show.stdout

    estimate = cli(bob, "estimate", waiting.name)
    assert estimate.exit_code == 0, estimate.output
    first = estimate.stdout.splitlines()[0]
    assert first.startswith("starts:") and "between " in first and "12 comparable runs" in first
    answer = json.loads(cli(bob, "estimate", waiting.name, "--json").stdout)["estimate"]
    assert answer["comparable_runs"] == 12 and answer["confidence"] == 0.9
    assert answer["earliest"] < answer["start_at"] < answer["latest"]

    queue = cli(bob, "queue")
    assert queue.exit_code == 0, queue.output
    header, row = queue.stdout.splitlines()[:2]
    assert "STARTS" in header
    assert re.search(r"\d\d:\d\d-\d\d:\d\d", row), row
    assert all(len(line) <= 100 for line in queue.stdout.splitlines()), queue.stdout
    wide = cli(bob, "queue", "--wide")
    assert "12 comparable runs" in wide.stdout
    as_json = json.loads(cli(bob, "queue", "--json").stdout)
    assert as_json[0]["start_estimate"]["comparable_runs"] == 12
