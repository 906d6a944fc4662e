"""Resubmit, templates, the submit form, cancel reasons, notifications and attempts, in
headless Chromium. Set ``GPUPOOL_SCREENSHOT_DIR=docs/screenshots`` to refresh the README's
pictures of the submit form."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from clusters.models import Node
from portal.jobs.services import job_submit
from portal.jobs.state import job_transition, preempting_end
from portal.models import Job, JobState, JobTemplate
from tests.browser.conftest import log_in, wait_until
from tests.conftest import job_body
from tests.dashboards.conftest import kubesim_cluster, place, start  # noqa: F401  (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _no_inline_script(p) -> None:
    """The pages work under a Content-Security-Policy without 'unsafe-inline': no inline
    script and no on…= handler anywhere in the DOM."""
    inline = p.evaluate(
        """() => ({
          scripts: [...document.querySelectorAll('script')].filter(s => !s.src).length,
          handlers: [...document.querySelectorAll('*')].flatMap(
            e => [...e.attributes].filter(a => a.name.startsWith('on')).map(a => a.name)),
        })"""
    )
    assert inline == {"scripts": 0, "handlers": []}


def _clean(page) -> None:
    assert page.console_errors == []
    assert page.foreign_requests() == []


@pytest.fixture
def east(kubesim_cluster):  # noqa: F811
    """kubesim's small pool: 2 x 8 A100, an A100 with MIG slices, 2 x 4 V100, 3 x 1 T4."""
    return kubesim_cluster("east")


def test_resubmit_opens_the_form_prefilled_and_submits_a_changed_copy(
    page, live_server, bob, catalog
):
    first = job_submit(
        user=bob, data=job_body(name="sweep-1", replicas=1, gpus_per_replica=2, env={"LR": "3e-4"})
    ).job
    p = page.page
    log_in(p, live_server, "bob", next_url=f"/jobs/{first.public_id}/")
    p.click("text=Resubmit…")
    p.wait_for_selector("#prefilled")
    assert p.input_value("#id_name") == "sweep-1"
    assert p.input_value("#id_image") == first.image
    assert p.input_value("#id_gpus_per_replica") == "2"
    assert p.input_value("#id_min_gpu_memory_gib") == "40"
    assert p.input_value("#id_env") == "LR=3e-4"
    assert p.input_value("#id_team") == "vision"
    _no_inline_script(p)
    p.fill("#id_name", "sweep-2")
    p.fill("#id_gpus_per_replica", "4")
    p.click("button:has-text('Submit')")
    p.wait_for_selector("h1:has-text('sweep-2')")
    second = Job.objects.get(name="sweep-2")
    assert (second.gpus_per_replica, second.env) == (4, {"LR": "3e-4"})
    assert "Resubmitted from sweep-1" in p.inner_text(".timeline")
    _clean(page)


def test_templates_from_a_job_and_built_in_ones_start_the_form(page, live_server, bob, catalog):
    job = job_submit(user=bob, data=job_body(name="nightly-eval", replicas=1)).job
    p = page.page
    log_in(p, live_server, "bob", next_url=f"/jobs/{job.public_id}/")
    p.click("text=Save as template…")
    p.wait_for_selector("#prefilled")
    assert p.input_value("#id_template_name") == "nightly-eval"
    p.fill("#id_template_name", "Nightly eval")
    p.fill("#id_description", "The eval we run every night")
    p.click("button:has-text('Save template')")
    p.wait_for_url(f"{live_server.url}/templates/")
    assert "Nightly eval" in p.inner_text("main")
    assert p.locator("text=GPU smoke test (nvidia-smi -L)").count() == 1
    _no_inline_script(p)

    p.goto(f"{live_server.url}/jobs/new/")
    p.wait_for_load_state("networkidle")  # leaving mid-request would abort the preview's
    smoke = JobTemplate.objects.get(key="gpu-smoke-test")
    p.select_option("#template-choice", str(smoke.pk))  # choosing alone loads nothing
    with p.expect_navigation():  # the button does
        p.click("button:has-text('Use template')")
    assert p.input_value("#id_command") == "nvidia-smi -L"
    assert p.input_value("#id_max_runtime_minutes") == "10"
    mine = JobTemplate.objects.get(name="Nightly eval")
    p.wait_for_load_state("networkidle")
    p.select_option("#template-choice", str(mine.pk))
    with p.expect_navigation():  # and so does Enter on the list
        p.press("#template-choice", "Enter")
    assert p.input_value("#id_name") == "nightly-eval"
    assert "The eval we run every night" in p.inner_text("#prefilled")
    p.click("button:has-text('Submit')")
    p.wait_for_selector("h1:has-text('nightly-eval')")
    assert Job.objects.filter(name="nightly-eval").count() == 2
    _clean(page)


def test_the_form_shows_one_requirement_and_previews_it_as_the_user_types(
    page, live_server, bob, east
):
    Node.objects.filter(cluster=east, name="v100-0").update(gpus_used_by_others=3)
    p = page.page
    p.set_viewport_size({"width": 1400, "height": 900})
    log_in(p, live_server, "bob", next_url="/jobs/new/")
    p.wait_for_selector("#match-result")
    assert p.is_visible("#id_min_gpu_memory_gib") and not p.is_visible("#id_gpu_models")
    first = p.locator("#match-result .match-list li").first
    assert "t4" in first.inner_text() and "tried first" in first.inner_text()
    assert p.is_visible("#mig-rule")  # "any GPU" does not lead with the cheaper MIG slice
    # The preview sits next to the requirement, not below the form.
    req, preview = (
        p.locator("#requirement").bounding_box(),
        p.locator("#match-preview").bounding_box(),
    )
    assert preview["x"] >= req["x"] + req["width"] - 1 and preview["y"] < req["y"] + req["height"]

    p.fill("#id_name", "typed")
    p.click("#id_min_gpu_memory_gib")
    p.keyboard.type("20")  # no change event: the preview follows the typing itself
    wait_until(
        p,
        "() => document.querySelector('#match-result .match-list li code').textContent"
        " === 'v100-32gb'",
    )
    assert p.evaluate("document.activeElement.id") == "id_min_gpu_memory_gib"
    expect(p.locator("#match-result .match-list")).not_to_contain_text("t4")
    p.fill("#id_replicas", "2")
    p.fill("#id_gpus_per_replica", "4")  # v100-0 has 1 GPU free: two 4-GPU replicas do not fit
    wait_until(
        p,
        "() => document.querySelector('#match-result li[data-model=\"v100-32gb\"]')"
        "?.textContent.includes('full now')",
    )
    # Retried: the preview may still swap in the answer to an earlier keystroke.
    expect(p.locator("#match-result li[data-model=a100-80gb]")).to_contain_text("room now")

    p.check("#id_requirement_1")  # By model list
    expect(p.locator("#id_gpu_models")).to_be_visible()
    expect(p.locator("#id_min_gpu_memory_gib")).to_be_hidden()
    assert p.locator("#id_gpu_models option[value=h100-sxm]").is_disabled()
    assert "no cluster has it" in p.inner_text("#id_gpu_models option[value=h100-sxm]")
    p.select_option("#id_selection_policy", "ordered")
    p.select_option("#id_gpu_models", ["v100-32gb"])
    p.select_option("#id_gpu_models", ["t4", "v100-32gb"])  # t4 picked second
    wait_until(
        p,
        "() => [...document.querySelectorAll('#match-result li[data-model]')]"
        ".map(li => li.dataset.model).join() === 'v100-32gb,t4'",
    )
    p.fill("#id_replicas", "1")
    p.fill("#id_gpus_per_replica", "1")
    p.fill("#id_image", "nvcr.io/nvidia/pytorch:24.05-py3")
    p.click("button:has-text('Submit')")
    p.wait_for_selector("h1:has-text('typed')")
    job = Job.objects.get(name="typed")
    assert (job.gpu_models, job.min_gpu_memory_gib) == (["v100-32gb", "t4"], None)
    _clean(page)


def test_every_error_shows_at_once_and_the_summary_takes_focus(page, live_server, bob, catalog):
    p = page.page
    log_in(p, live_server, "bob", next_url="/jobs/new/")
    p.fill("#id_name", "bad job")
    p.fill("#id_image", "Not An Image")
    p.fill("#id_replicas", "0")
    p.fill("#id_env", "1BAD=x")
    p.click("button:has-text('Submit')")
    p.wait_for_selector("#error-summary")
    assert p.evaluate("document.activeElement.id") == "error-summary"
    links = p.locator("#error-summary a")
    assert links.count() == 3
    assert "Container image" in p.inner_text("#error-summary")
    p.click("#error-summary a[href='#id_image']")
    assert p.evaluate("document.activeElement.id") == "id_image"
    assert p.get_attribute("#id_image", "aria-invalid") == "true"
    assert "id_image_error" in p.get_attribute("#id_image", "aria-describedby")
    assert Job.objects.count() == 0
    _no_inline_script(p)
    _clean_but_the_400(page)


def _clean_but_the_400(page) -> None:
    """A refused submit answers 400, which Chromium logs as a console error; nothing else."""
    assert all("400" in e for e in page.console_errors), page.console_errors
    assert page.foreign_requests() == []


def test_a_platform_admin_in_no_team_is_told_how_to_submit(page, live_server, root, catalog):
    p = page.page
    log_in(p, live_server, "root", next_url="/jobs/new/")
    assert "platform admin, but in no team" in p.inner_text("#no-team")
    assert p.locator("#no-team a[href='/admin/portal/membership/add/']").count() == 1
    _clean(page)


def test_a_cancel_reason_reaches_the_owner_through_the_bell(
    page, browser, live_server, alice, bob, catalog
):
    job = job_submit(user=bob, data=job_body(name="hog")).job
    p = page.page
    log_in(p, live_server, "alice", next_url=f"/jobs/{job.public_id}/")
    p.click("text=Cancel job…")
    p.fill("#id_reason", "Holding 8 GPUs for the deadline run; please resubmit Monday.")
    p.click("text=Yes, cancel the job")
    p.wait_for_selector("h1 .state-cancelled")
    _no_inline_script(p)

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    owner = context.new_page()
    try:
        log_in(owner, live_server, "bob", next_url="/jobs/")
        owner.wait_for_selector("#bell .bell-count")
        assert owner.inner_text("#bell .bell-count").startswith("1")
        assert owner.locator("td:has-text('hog') .badge-preempted").count() == 0
        owner.click("#bell")  # opens the recent notifications under the bell
        owner.wait_for_selector("#bell-panel li")
        assert "hog was cancelled by alice" in owner.inner_text("#bell-panel")
        assert "please resubmit Monday" in owner.inner_text("#bell-panel")
        owner.click("#bell-panel li a")
        owner.wait_for_selector("#cancel-reason")
        assert "Cancelled by alice" in owner.inner_text("#cancel-reason")
        assert "please resubmit Monday" in owner.inner_text("#cancel-reason")
        assert "please resubmit Monday" in owner.inner_text(".timeline")
        owner.wait_for_selector("#bell:not(:has(.bell-count))")
    finally:
        context.close()
    _clean(page)


def test_a_preempted_job_is_badged_and_its_attempts_are_reachable(page, live_server, bob, east):
    t0 = timezone.now() - dt.timedelta(hours=1)
    job = job_submit(user=bob, data=job_body(name="ddp", replicas=2, gpus_per_replica=4)).job
    start(place(job, cluster=east, model="a100-80gb", nodes=["a100-0", "a100-1"], at=t0), at=t0)
    assert job_transition(
        job_id=job.pk,
        expected=JobState.RUNNING,
        to=JobState.PREEMPTING,
        reason="Preempted",
        message="Preempted for language's job (within its nominal quota).",
    )
    assert preempting_end(job_id=job.pk)
    p = page.page
    log_in(p, live_server, "bob", next_url="/jobs/")
    assert p.inner_text("tr:has-text('ddp') .badge-preempted") == "preempted ×1"
    p.click("text=ddp")
    p.wait_for_selector("#attempts")
    assert p.locator("#placement").count() == 0  # no stale "why a100 on east"
    assert "not assigned yet" in p.inner_text("#placement-card")
    p.click("#attempts a:has-text('Attempt 1')")
    p.wait_for_selector("#attempt-placement")
    assert "a100-0, a100-1" in p.inner_text("#attempt-placement")
    assert "Preempted for language's job" in p.inner_text("#attempt-placement")
    _no_inline_script(p)
    _clean(page)


def test_the_submit_form_screenshots(page, live_server, bob, east, tmp_path):
    """The README's pictures of the form (desktop and phone), with an error summary."""
    shots = Path(os.environ.get("GPUPOOL_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    p = page.page
    p.set_viewport_size({"width": 1400, "height": 900})
    log_in(p, live_server, "bob", next_url="/jobs/new/")
    p.fill("#id_name", "bert-finetune")
    p.fill("#id_image", "nvcr.io/nvidia/pytorch:24.05-py3")
    p.fill("#id_command", "torchrun train.py --epochs 3")
    p.fill("#id_gpus_per_replica", "4")
    p.fill("#id_min_gpu_memory_gib", "24")
    wait_until(
        p,
        "() => document.querySelector('#match-result .match-list li code')?.textContent"
        " === 'v100-32gb'",
    )
    p.screenshot(path=str(shots / "submit.png"), full_page=True)
    p.set_viewport_size({"width": 390, "height": 844})
    assert p.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    p.screenshot(path=str(shots / "submit-phone.png"), full_page=True)
    _clean(page)
