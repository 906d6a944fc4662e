"""The what-if preview in the browser: a platform admin types a quota change, asks what the
next cycle would do, reads it, and nothing is saved; the same for a drain."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.utils import timezone

from clusters.models import Cluster, Node
from portal.jobs.services import job_submit
from portal.models import Job, JobState
from scheduling.models import GpuModel, Quota, QuotaChange
from tests.browser.conftest import log_in, wait_until
from tests.conftest import job_body

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def waiting_job(catalog, vision, language, bob):
    """Vision has no A100 quota; its 8-GPU job waits on a pool with two idle A100 nodes."""
    cluster = Cluster.objects.create(name="east", api_url="https://east.k8s.test")
    model = GpuModel.objects.get(key="a100-80gb")
    for i in range(2):
        Node.objects.create(
            cluster=cluster,
            name=f"a100-{i}",
            gpu_model=model,
            gpu_allocatable=8,
            last_seen_at=timezone.now(),
        )
    Quota.objects.create(team=vision, gpu_model=model, nominal=0, borrowing_limit=0)
    body = job_body(name="needs-quota", replicas=1, gpus_per_replica=8, gpu_models=["a100-80gb"])
    body.pop("min_gpu_memory_gib")
    return job_submit(user=bob, data=body).job


def test_an_admin_previews_a_quota_change_before_saving_it(
    page, live_server, root, waiting_job, tmp_path
):
    shots = Path(os.environ.get("GPUPOOL_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    p = page.page
    log_in(p, live_server, "root", next_url="/quotas/")
    p.fill('input[name="n:vision:a100-80gb"]', "8")
    p.locator("#quota-form [data-preview-button]").click()
    wait_until(p, "!!document.querySelector('#quota-preview [data-preview-start]')")
    started = p.inner_text("#quota-preview [data-preview-start]")
    assert "needs-quota (vision): 8 × a100-80gb in east" in started
    assert "only with these changes" in started
    guarantees = p.inner_text("#quota-preview [data-preview-guarantees]")
    assert "0 → 8" in guarantees
    # a second look with an overcommitting value replaces the first
    p.fill('input[name="n:vision:a100-80gb"]', "20")
    p.locator("#quota-form [data-preview-button]").click()
    wait_until(
        p,
        "document.querySelector('#quota-preview [data-preview-guarantees]')"
        ".innerText.includes('0 → 20')",
    )
    assert p.locator("#quota-preview tr.over").count() == 1
    p.locator("#quota-preview").screenshot(path=str(shots / "quota-preview.png"))
    assert not QuotaChange.objects.exists()
    assert Job.objects.get(pk=waiting_job.pk).state == JobState.QUEUED
    assert page.console_errors == []


def test_a_bad_value_is_named_instead_of_a_preview(page, live_server, root, waiting_job):
    p = page.page
    log_in(p, live_server, "root", next_url="/quotas/")
    p.fill('input[name="n:vision:a100-80gb"]', "-2")
    p.locator("#quota-form [data-preview-button]").click()
    wait_until(p, "!!document.querySelector('#quota-preview [role=alert]')")
    assert "vision/a100-80gb nominal" in p.inner_text("#quota-preview [role=alert]")


def test_the_drain_confirmation_shows_the_jobs_it_would_block(
    page, live_server, root, vision, waiting_job
):
    Quota.objects.filter(team=vision).update(nominal=8)
    p = page.page
    log_in(p, live_server, "root", next_url="/clusters/east/state/draining/")
    blocked = p.inner_text("[data-preview-blocked]")
    assert "needs-quota (vision): CLUSTER_DRAINING" in blocked
    assert "without the changes: it would start" in blocked
    assert page.console_errors == []
