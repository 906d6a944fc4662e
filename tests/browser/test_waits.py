"""Why a job waits, in headless Chromium: the blocker first, the queue's 'waiting for' column
and its sort, hidden positions in words, and pages that refresh without taking focus. Set
``GPUPOOL_SCREENSHOT_DIR=docs/screenshots`` to refresh the README's picture of a waiting job."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from django.utils import timezone

from portal.jobs.services import job_submit
from portal.models import Job, JobWait
from scheduling.cycle import run_cycle
from tests.browser.conftest import log_in, wait_until
from tests.conftest import job_body
from tests.scheduling.conftest import pool, quota  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _clean(page) -> None:
    assert page.console_errors == []
    assert page.foreign_requests() == []


@pytest.fixture
def nodes(pool):  # noqa: F811
    return pool


@pytest.fixture
def quotas(quota):  # noqa: F811
    return quota


@pytest.fixture
def blocked(bob, vision, nodes, quotas):
    """A 4-GPU job blocked on a100-80gb (a 6-GPU job holds the one 8-GPU node); west's
    a100-40gb is eligible but out of quota; l40s and T4 can never take it."""
    nodes("east", "a100-80gb", nodes=1, gpus=8)
    nodes("west", "a100-40gb", nodes=1, gpus=8)
    quotas(vision, "a100-80gb", nominal=16)
    job_submit(user=bob, data=job_body(name="big", replicas=1, gpus_per_replica=6))
    run_cycle()
    job = job_submit(user=bob, data=job_body(name="waiting", replicas=1, gpus_per_replica=4)).job
    run_cycle()
    job.refresh_from_db()
    return job


def test_the_job_page_leads_with_the_closest_candidate_and_collapses_the_rest(
    page, live_server, blocked, tmp_path
):
    p = page.page
    p.set_viewport_size({"width": 1400, "height": 900})
    log_in(p, live_server, "bob", next_url=f"/jobs/{blocked.public_id}/")
    # One plain sentence, its code in the tooltip; the closest candidate's note is not said
    # twice, and no second code names the same cause.
    sentence = p.locator("#blocker-sentence")
    assert sentence.inner_text().startswith("No GPUs that fit it are free now: needs 4")
    assert "a100-80gb" in sentence.inner_text()
    assert "largest free block 2" in sentence.inner_text()
    assert sentence.get_attribute("title") == "Reason code NO_CAPACITY"
    blocker_text = p.inner_text("#blocker")
    assert blocker_text.count("largest free block 2") == 1
    assert "NO_NODE_FITS" not in blocker_text and "NO_CAPACITY" not in blocker_text
    others = p.locator("#blocker-others")
    assert others.get_attribute("open") is None  # collapsed
    assert not p.is_visible("#blocker-others li")
    p.click("#blocker-others summary")
    assert "a100-40gb" in p.inner_text("#blocker-others li")
    never = p.inner_text("#blocker-never")
    assert "can never take it" in never and "requirement not met" in never
    estimate = p.inner_text("#start-estimate")
    assert "an estimate, not a promise" in estimate and "Basis:" in estimate
    assert "max runtime" in estimate
    shots = Path(os.environ.get("GPUPOOL_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    p.screenshot(path=str(shots / "job-waiting.png"))
    _clean(page)


def test_the_queue_sorts_by_waiting_time_from_the_keyboard(
    page, live_server, bob, nodes, quotas, vision
):
    nodes("east", "t4", nodes=1, gpus=4)
    quotas(vision, "t4", nominal=0)
    for name, minutes in [("recent", 5), ("oldest", 200), ("middle", 65)]:
        job = job_submit(
            user=bob,
            data=job_body(name=name, replicas=1, gpus_per_replica=4, min_gpu_memory_gib=None),
        ).job
        Job.objects.filter(pk=job.pk).update(
            state_changed_at=timezone.now() - dt.timedelta(minutes=minutes)
        )
    p = page.page
    log_in(p, live_server, "bob", next_url="/queue/")
    header = p.locator("th", has=p.locator("#sort-waiting"))
    assert header.get_attribute("aria-sort") == "none"
    p.focus("#sort-waiting")
    p.keyboard.press("Enter")
    p.wait_for_url("**/queue/?sort=waiting")
    names = p.locator("#queue-table tbody tr td:nth-child(2) a").all_inner_texts()
    assert names == ["oldest", "middle", "recent"]
    assert p.locator("th", has=p.locator("#sort-waiting")).get_attribute("aria-sort") == (
        "descending"
    )
    waited = p.locator("#queue-table tbody tr td.waited").all_inner_texts()
    assert waited[0] == "3h 20m" and waited[1] == "1h 5m"
    p.click("#sort-waiting")  # again: shortest first
    p.wait_for_url("**/queue/?sort=-waiting")
    names = p.locator("#queue-table tbody tr td:nth-child(2) a").all_inner_texts()
    assert names == ["recent", "middle", "oldest"]
    _clean(page)


def test_positions_of_other_teams_jobs_are_said_in_words(
    page,
    live_server,
    bob,
    charlie,
    vision,
    language,
    nodes,
    quotas,
):
    nodes("east", "a100-80gb", nodes=2, gpus=8)
    quotas(vision, "a100-80gb", nominal=16)
    quotas(language, "a100-80gb", nominal=16)
    job_submit(user=bob, data=job_body(name="first", replicas=1, gpus_per_replica=8))
    run_cycle()
    older = timezone.now() - dt.timedelta(hours=1)
    for i in range(3):
        theirs = job_submit(
            user=charlie,
            data=job_body(team="language", name=f"l{i}", replicas=1, gpus_per_replica=8),
        ).job
        Job.objects.filter(pk=theirs.pk).update(submitted_at=older + dt.timedelta(seconds=i))
    mine = job_submit(user=bob, data=job_body(name="mine", replicas=1, gpus_per_replica=8)).job
    run_cycle()
    p = page.page
    log_in(p, live_server, "bob", next_url="/queue/")
    row = p.locator(f'#queue-table tr[data-job="{mine.public_id}"]')
    assert row.locator("td.position").inner_text().split() == [
        "3", "2", "jobs", "of", "other", "teams", "ahead",
    ]  # fmt: skip
    assert p.locator("#queue-table tbody tr").count() == 1  # Language's jobs stay hidden
    p.goto(f"{live_server.url}/jobs/{mine.public_id}/")
    assert "Position 3 in line (2 jobs of other teams ahead)" in p.inner_text("#pending-reason")
    _clean(page)


def test_the_job_page_refreshes_without_taking_focus_or_scroll(page, live_server, blocked):
    p = page.page
    p.set_viewport_size({"width": 1280, "height": 500})
    log_in(p, live_server, "bob", next_url=f"/jobs/{blocked.public_id}/")
    p.click("#blocker-others summary")  # opened by the user: stays open across refreshes
    p.focus("text=Cancel job…")  # a control outside the refreshing part
    p.evaluate("window.scrollTo(0, 120)")
    # What the user looks at: the focused button, where it is on the screen.
    seen = p.locator("#job-actions").bounding_box()["y"]
    # The next cycle's words arrive by themselves.
    JobWait.objects.filter(job_id=blocked.pk).update(reason="needs 4 × a100-80gb; refreshed words")
    wait_until(
        p,
        "document.querySelector('#pending-reason').textContent.includes('refreshed words')",
        timeout=15,
    )
    assert p.evaluate("document.activeElement.textContent.trim()") == "Cancel job…"
    # The shorter reason above the screen's top takes a line out of the page; the browser's
    # scroll anchoring moves the scroll with it, so what is on the screen stays where it was.
    assert abs(p.locator("#job-actions").bounding_box()["y"] - seen) < 1
    assert p.locator("#blocker-others").get_attribute("open") is not None
    _clean(page)


def test_the_queue_refreshes_around_a_focused_filter(page, live_server, blocked):
    p = page.page
    log_in(p, live_server, "bob", next_url="/queue/")
    p.focus("#team")
    JobWait.objects.filter(job_id=blocked.pk).update(reason="needs 4 × a100-80gb; new words")
    wait_until(
        p,
        "document.querySelector('#queue-table').textContent.includes('new words')",
        timeout=15,
    )
    assert p.evaluate("document.activeElement.id") == "team"
    _clean(page)


def test_a_refresh_waits_while_focus_is_inside_the_refreshing_part(page, live_server, blocked):
    p = page.page
    log_in(p, live_server, "bob", next_url=f"/jobs/{blocked.public_id}/")
    p.focus("#blocker-others summary")
    JobWait.objects.filter(job_id=blocked.pk).update(reason="needs 4 × a100-80gb; later words")
    p.wait_for_timeout(6500)  # more than one refresh period
    assert p.evaluate("document.activeElement.closest('#blocker-others') !== null")
    assert "later words" not in p.inner_text("#pending-reason")  # not swapped under the user
    p.focus("text=Cancel job…")  # focus leaves the part: the next refresh goes through
    wait_until(
        p,
        "document.querySelector('#pending-reason').textContent.includes('later words')",
        timeout=15,
    )
    assert p.evaluate("document.activeElement.textContent.trim()") == "Cancel job…"
    _clean(page)
