"""Start estimates in headless Chromium: the submit form's estimate next to the model
preview, a queued job's stored estimate and its alternatives on demand, the queue's column."""

from __future__ import annotations

import pytest

from portal.jobs import services
from portal.jobs.services import job_submit
from scheduling.cycle import run_cycle
from scheduling.tasks import estimates_refresh_now
from tests.browser.conftest import log_in, wait_until
from tests.conftest import job_body
from tests.scheduling.conftest import pool, quota  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _forget_the_largest_node():
    """The live server's pages cache the largest node per process for 10 s (outside a
    transaction): forget it, so the next test's pool is read afresh."""
    yield
    services._largest_node.forget()


@pytest.fixture
def waiting(bob, vision, pool, quota):  # noqa: F811
    """A 2 x 2 GPU gang waits on a100-80gb behind a 6-GPU job on the one 8-GPU node."""
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=16)
    a100 = {"gpu_models": ["a100-80gb"], "min_gpu_memory_gib": None}
    job_submit(user=bob, data=job_body(name="big", replicas=1, gpus_per_replica=6, **a100))
    run_cycle()
    job = job_submit(
        user=bob, data=job_body(name="waiting", replicas=2, gpus_per_replica=2, **a100)
    ).job
    run_cycle()
    assert estimates_refresh_now() == 1
    job.refresh_from_db()
    return job


def test_estimates_on_the_job_page_the_queue_and_the_submit_form(page, live_server, waiting):
    p = page.page
    log_in(p, live_server, "bob", next_url=f"/jobs/{waiting.public_id}/")
    stored = p.inner_text("#start-estimate")
    assert "an estimate, not a promise" in stored and "a100-80gb" in stored
    assert "max runtime" in stored  # the basis of the running job's expected end
    p.click("#estimate-alternatives")
    wait_until(p, "!!document.querySelector('#estimate-alternatives-table')")
    rows = p.inner_text("#estimate-alternatives-table")
    assert "1 replica instead of 2" in rows and "now" in rows  # 2 GPUs are free now

    p.goto(f"{live_server.url}/queue/")
    cell = p.inner_text(f"tr[data-job='{waiting.public_id}'] .estimate-cell")
    assert "a100-80gb" in cell and "east" in cell

    p.goto(f"{live_server.url}/jobs/new/")
    wait_until(p, "!!document.querySelector('#estimate-preview #estimate-result')")
    preview = p.inner_text("#estimate-preview")
    assert "Estimated start" in preview
    assert "an estimate, not a promise" in preview or "No estimate" in preview
    p.fill("#id_gpus_per_replica", "0")
    p.dispatch_event("#id_gpus_per_replica", "change")
    wait_until(p, "document.querySelector('#estimate-preview').innerText.includes('No estimate')")
    assert page.console_errors == []
    assert page.foreign_requests() == []
