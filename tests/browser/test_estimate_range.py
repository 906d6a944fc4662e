"""A start estimate's likely range in headless Chromium: on the job page and the queue,
"unknown" once the job it waits on has outlived what was learned, and the platform admins'
calibration page."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from portal.jobs import services
from portal.jobs.services import job_submit
from portal.models import Job, JobState
from scheduling.cycle import run_cycle
from scheduling.tasks import estimates_refresh_now
from tests.browser.conftest import log_in
from tests.conftest import job_body
from tests.factories import JobFactory
from tests.scheduling.conftest import pool, quota  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

A100 = {"gpu_models": ["a100-80gb"], "min_gpu_memory_gib": None}


@pytest.fixture(autouse=True)
def _forget_the_largest_node():
    yield
    services._largest_node.forget()


@pytest.fixture
def waiting(bob, vision, pool, quota):  # noqa: F811
    """An 8-GPU job waits behind another on the one 8-GPU node; 12 runs like the running one
    finished, about 40 minutes each."""
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=16)
    end = timezone.now() - dt.timedelta(hours=2)
    for i in range(12):
        JobFactory(
            team=vision,
            owner=bob,
            name=f"train-{i}",
            state=JobState.SUCCEEDED,
            started_at=end - dt.timedelta(minutes=35 + i),
            finished_at=end,
        )
    job_submit(user=bob, data=job_body(name="train-99", replicas=1, gpus_per_replica=8, **A100))
    run_cycle()
    job = job_submit(
        user=bob, data=job_body(name="after", replicas=1, gpus_per_replica=8, **A100)
    ).job
    run_cycle()
    assert estimates_refresh_now() == 1
    return job


def test_the_job_page_and_the_queue_show_a_range_then_unknown(page, live_server, waiting):
    p = page.page
    log_in(p, live_server, "bob", next_url=f"/jobs/{waiting.public_id}/")
    shown = p.inner_text("#estimate-range")
    assert shown.startswith("between ") and "most likely" in shown
    assert "12 comparable runs" in shown and "9 in 10 starts" in shown
    p.goto(f"{live_server.url}/queue/")
    cell = p.inner_text(f"tr[data-job='{waiting.public_id}'] .estimate-cell")
    assert "between " in cell and "12 comparable runs" in cell

    # The running job has now run 5 hours, far past its runs' 35-46 minutes: when it ends is
    # not known, and the waiting job says so instead of "soon".
    running = Job.objects.get(name="train-99")
    long_ago = timezone.now() - dt.timedelta(hours=5)
    Job.objects.filter(pk=running.pk).update(started_at=long_ago, admitted_at=long_ago)
    estimates_refresh_now()
    p.goto(f"{live_server.url}/jobs/{waiting.public_id}/")
    shown = p.inner_text("#estimate-range")
    assert shown.startswith("unknown: it waits on a running job that has run longer")
    assert "assumed to end soon" not in p.inner_text("#start-estimate")
    assert "outlived" in p.inner_text("#start-estimate")
    assert page.console_errors == []


def test_platform_admins_see_how_the_estimates_came_out(page, live_server, root, bob):
    p = page.page
    log_in(p, live_server, "bob", next_url="/pool/estimates/")
    assert "Only platform admins" in p.content()
    p.context.clear_cookies()
    log_in(p, live_server, "root", next_url="/queue/")
    p.click("#estimate-calibration-link")
    p.wait_for_url(f"{live_server.url}/pool/estimates/")
    assert p.inner_text("h1").startswith("Start estimates")
    buckets = p.eval_on_selector_all(
        "#estimate-calibration tbody tr", "rows => rows.map(r => r.dataset.bucket)"
    )
    assert buckets == ["under 10 min", "10 min to 1 h", "1 to 6 h", "over 6 h", "every start"]
