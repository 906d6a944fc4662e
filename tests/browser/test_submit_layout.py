"""The submit form as a keyboard user and a researcher meet it, in Chromium: the template
picker loads only when asked (WCAG 3.2.2), only the fields that mean something here are shown
(shared-GPU ones with a shared pool, serving ones for inference), the command takes several
lines, and the start estimate is in view beside the first fields at 1400 × 900."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from portal.models import Job, JobKind, JobTemplate
from scheduling.models import GpuModel
from tests.browser.conftest import log_in, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _clean(page) -> None:
    assert page.console_errors == []
    assert page.foreign_requests() == []


def test_arrow_keys_on_the_template_picker_move_the_choice_and_keep_focus(
    page, live_server, bob, catalog
):
    assert JobTemplate.objects.count() >= 2  # the built-in ones
    p = page.page
    log_in(p, live_server, "bob", next_url="/jobs/new/")
    p.wait_for_load_state("networkidle")
    url = p.url
    p.evaluate("window.__marker = 1")  # survives only if the page is not reloaded
    p.focus("#template-choice")
    p.keyboard.press("ArrowDown")
    p.keyboard.press("ArrowDown")
    p.wait_for_timeout(500)  # time for a navigation, were one to start
    assert p.evaluate("window.__marker") == 1 and p.url == url
    assert p.evaluate("document.activeElement.id") == "template-choice"
    chosen = p.input_value("#template-choice")
    assert chosen != ""  # the choice moved
    assert p.locator("#prefilled").count() == 0
    # Enter loads the template that was chosen
    with p.expect_navigation():
        p.keyboard.press("Enter")
    assert f"template={chosen}" in p.url
    name = JobTemplate.objects.get(pk=chosen).name
    assert name in p.inner_text("#prefilled")
    _clean(page)


def test_shared_gpu_fields_show_only_when_a_shared_pool_exists(page, live_server, bob, catalog):
    assert not GpuModel.objects.filter(shares__isnull=False).exists()
    p = page.page
    log_in(p, live_server, "bob", next_url="/jobs/new/")
    assert p.locator("#id_gpu_memory_gib").count() == 0
    assert p.locator("#id_gpu_cores_percent").count() == 0
    assert p.is_visible("#id_gpus_per_replica")
    card = GpuModel.objects.get(key="a100-80gb")
    GpuModel.objects.create(
        key="a100-80gb-shared",
        display_name="NVIDIA A100 80GB (shared)",
        memory_gib=card.memory_gib,
        fp16_tflops=card.fp16_tflops,
        cost_factor=card.cost_factor / card.memory_gib,
        shares=card,
    )
    p.goto(f"{live_server.url}/jobs/new/")
    assert p.is_visible("#id_gpu_memory_gib") and p.is_visible("#id_gpu_cores_percent")
    _clean(page)


def test_serving_fields_only_for_inference_and_a_command_over_several_lines(
    page, live_server, bob, catalog
):
    p = page.page
    log_in(p, live_server, "bob", next_url="/jobs/new/")
    serving = p.locator("#serving-fields")
    expect(serving).to_be_hidden()  # a training job by default
    p.select_option("#id_kind", JobKind.INFERENCE)
    expect(serving).to_be_visible()
    p.fill("#id_port", "8000")
    p.select_option("#id_kind", JobKind.TRAINING)
    expect(serving).to_be_hidden()
    # the command is a box of several lines; a line ending in \ goes on on the next
    assert p.evaluate("document.querySelector('#id_command').tagName") == "TEXTAREA"
    p.fill("#id_name", "two-lines")
    p.fill("#id_image", "nvcr.io/nvidia/pytorch:24.05-py3")
    p.fill("#id_command", "torchrun --nproc-per-node 2 \\\n  train.py --note 'a b'")
    p.fill("#id_min_gpu_memory_gib", "24")
    p.click("button:has-text('Submit')")
    # the port typed while it was an inference job is not sent: no "only inference" refusal
    p.wait_for_selector("h1:has-text('two-lines')")
    job = Job.objects.get(name="two-lines")
    assert job.kind == JobKind.TRAINING and job.port is None
    assert job.command == ["torchrun", "--nproc-per-node", "2", "train.py", "--note", "a b"]
    _clean(page)


def test_the_estimate_is_in_view_beside_the_first_fields_at_1400_by_900(
    page, live_server, bob, catalog
):
    p = page.page
    p.set_viewport_size({"width": 1400, "height": 900})
    log_in(p, live_server, "bob", next_url="/jobs/new/")
    wait_until(p, "!!document.querySelector('#estimate-preview #estimate-result')")
    estimate = p.locator("#estimate-preview").bounding_box()
    job = p.locator("fieldset.group").first.bounding_box()
    assert estimate is not None and job is not None
    assert estimate["y"] < 400, estimate  # its heading and first lines on the first screen
    assert estimate["x"] >= job["x"] + job["width"], (estimate, job)  # a side column
    assert p.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # a phone keeps one column: the estimate comes after the requirement, before the limits
    p.set_viewport_size({"width": 390, "height": 844})
    estimate = p.locator("#estimate-preview").bounding_box()
    requirement = p.locator("#requirement").bounding_box()
    assert estimate["y"] > requirement["y"] + requirement["height"] - 1
    _clean(page)
