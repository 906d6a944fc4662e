"""A running job's log in Chromium: it follows new lines (polling every 3 s), stays at the
bottom unless the reader scrolls up, switches replica, shows timestamps, downloads the whole
log, and stops following when the job ends. kubesim writes a line every 10 simulated seconds;
its clock moves only when the test advances it."""

from __future__ import annotations

import re

import pytest

from clusters.dispatch import job_dispatch
from clusters.tasks import cluster_reconcile_and_enqueue
from portal.models import Job, JobState
from tests.browser.conftest import log_in, wait_until
from tests.clusters.conftest import (  # noqa: F401  (fixtures)
    _cluster_settings,
    _fresh_clients,
    admit,
    cluster,
    register,
    sim,
    sim_config,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LINES = "document.querySelector('#job-logs pre.log').innerText.trim().split('\\n').length"
AT_BOTTOM = """() => { const p = document.querySelector('#job-logs pre.log');
                     return p.scrollTop + p.clientHeight >= p.scrollHeight - 8; }"""


def _last_step(p) -> int:
    text = p.inner_text("#job-logs pre.log")
    return max(int(n) for n in re.findall(r"step (\d+):", text))


@pytest.fixture
def running_job(sim, cluster, admit):  # noqa: F811  (the imported fixtures)
    job = admit(cluster, replicas=2, gpus_per_replica=1, command=["sh", "-c", "sleep 900"])
    assert job_dispatch(job_id=job.pk)
    sim.advance(3)
    sim.advance(400)  # 40 lines or so: more than the box shows, so it scrolls
    cluster_reconcile_and_enqueue(cluster=cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    return job


def test_follow_mode_sticks_to_the_bottom_unless_the_reader_scrolls_up(
    page,
    live_server,
    sim,  # noqa: F811
    cluster,  # noqa: F811
    running_job,
    bob,
):
    p = page.page
    log_in(p, live_server, "bob", next_url=f"/jobs/{running_job.public_id}/")
    p.wait_for_selector("#job-logs pre.log")
    assert p.inner_text("#job-logs .log-meta").startswith("Pod ")
    assert p.locator("#job-logs .log-meta code").inner_text().endswith("-master-0")
    before = _last_step(p)

    p.check("#log-follow")
    wait_until(p, AT_BOTTOM)
    sim.advance(30)
    wait_until(
        p, f"() => /step {before + 3}:/.test(document.querySelector('#job-logs pre.log').innerText)"
    )
    assert p.evaluate(AT_BOTTOM)  # followed to the new lines
    assert p.evaluate("window.gpupoolLogs['job-logs'].polls") >= 1

    # the reader scrolls up to read something: new lines come, the view stays put
    p.evaluate("document.querySelector('#job-logs pre.log').scrollTop = 0")
    lines = p.evaluate(LINES)
    sim.advance(30)
    wait_until(p, f"() => {LINES} > {lines}")
    assert p.evaluate("document.querySelector('#job-logs pre.log').scrollTop") == 0
    latest = p.locator("#log-latest")
    assert latest.is_visible()
    latest.click()
    assert p.evaluate(AT_BOTTOM) and not latest.is_visible()
    text = p.inner_text("#job-logs pre.log")
    steps = [int(n) for n in re.findall(r"step (\d+):", text)]
    assert steps == sorted(set(steps))  # nothing twice, nothing out of order

    # timestamps: shown by a class, carried to the download link
    assert not p.locator("#job-logs pre.log .ts").first.is_visible()
    p.check("#log-timestamps")
    assert re.match(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", p.locator("#job-logs pre.log .ts").first.inner_text()
    )
    assert "timestamps=1" in p.get_attribute("#log-download", "href")

    # the whole log, not just the lines shown
    with p.expect_download() as download:
        p.click("#log-download")
    with open(download.value.path(), encoding="utf-8") as saved:
        content = saved.read().splitlines()
    assert download.value.suggested_filename.endswith("-replica-0.log")
    assert content[0].split(" ")[0].endswith("Z") and "kubesim: container" in content[0]
    assert f"step {steps[-1]}:" in content[-1]  # up to the latest line

    # another replica, still followed
    p.select_option("#log-replica", "1")
    wait_until(
        p, "document.querySelector('#job-logs .log-meta code').innerText.endsWith('-worker-0')"
    )
    assert p.is_checked("#log-follow") and p.is_checked("#log-timestamps")
    here = _last_step(p)
    sim.advance(20)
    wait_until(
        p, f"() => /step {here + 2}:/.test(document.querySelector('#job-logs pre.log').innerText)"
    )

    # the job ends: following stops and says so
    Job.objects.filter(pk=running_job.pk).update(state=JobState.SUCCEEDED)
    wait_until(p, "document.querySelector('#log-status').innerText.includes('following stopped')")
    assert page.console_errors == [] and page.foreign_requests() == []
