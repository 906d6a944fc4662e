"""Why a job waits and when it may start, from the cycle through the API and the pages."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboards.live import LiveState
from portal.jobs.services import job_submit
from portal.models import Job, JobState, PendingNotes
from rules import engine
from scheduling import cycle, snapshot
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel
from tests.conftest import job_body

pytestmark = pytest.mark.django_db


def submit(user, **overrides):
    return job_submit(user=user, data=job_body(**overrides)).job


@pytest.fixture
def blocked(bob, vision, pool, quota):
    """A 4-GPU job (≥ 40 GiB) blocked on a100-80gb, where a 6-GPU job runs on the one 8-GPU
    node; west's a100-40gb is eligible but the team has no quota there; l40s, the cheapest
    adequate model, and the others are in no cluster; T4 is too small."""
    pool("east", "a100-80gb", nodes=1, gpus=8)
    pool("west", "a100-40gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=16)
    running = submit(bob, name="big", replicas=1, gpus_per_replica=6)
    run_cycle()
    running.refresh_from_db()
    assert running.state == JobState.ADMITTED
    job = submit(bob, name="waiting", replicas=1, gpus_per_replica=4)
    run_cycle()
    job.refresh_from_db()
    return job, running


def test_the_cycle_stores_the_closest_candidate_first_and_the_never_apart(blocked):
    job, _ = blocked
    assert job.state == JobState.QUEUED
    assert job.pending_model == "a100-80gb"
    notes = job.pending_notes.notes
    kinds = {model: (code, kind) for model, code, _msg, kind in notes}
    assert kinds["a100-80gb"] == ("NO_NODE_FITS", "lead")
    assert kinds["a100-40gb"][1] == "other"  # eligible: quota, not hardware, stops it
    assert kinds["l40s"] == ("NO_ENABLED_CLUSTER", "never")  # in no cluster
    assert kinds["t4"] == ("REQUIREMENT_NOT_MET", "never")
    lead = next(m for _model, _c, m, k in notes if k == "lead")
    assert "largest free block 2" in lead


def test_unchanged_reasons_are_not_written_again(blocked):
    loaded = snapshot.snapshot_load(now=timezone.now(), config=snapshot.engine_config())
    decision = engine.decide(loaded.snapshot, snapshot.engine_config())
    # The stored notes' key matches the engine's: nothing to write.
    reasons = cycle._reason_rows(decision, loaded)
    assert (reasons.rows, reasons.notes) == ([], {})


def test_jobs_that_wait_the_same_way_share_their_notes_and_unused_notes_go(
    bob, vision, pool, quota
):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=0)  # nothing to lend: every job waits the same way
    jobs = [submit(bob, name=f"same{i}", replicas=1, gpus_per_replica=4) for i in range(3)]
    run_cycle()
    keys = {j.pending_notes_id for j in Job.objects.filter(pk__in=[j.pk for j in jobs])}
    assert len(keys) == 1 and None not in keys
    assert PendingNotes.objects.count() == 1
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(state=JobState.CANCELLED)
    PendingNotes.objects.create(key="0" * 32, notes=[])
    assert cycle.notes_prune(now=timezone.now(), force=True) == 2
    assert PendingNotes.objects.count() == 0


def test_wait_statistics_count_the_job_under_its_closest_candidate_not_the_cheapest(
    blocked, vision
):
    queued = LiveState().queued
    a100 = GpuModel.objects.get(key="a100-80gb").pk
    l40s = GpuModel.objects.get(key="l40s").pk
    assert queued[(vision.pk, a100)] == (1, 4)
    assert (vision.pk, l40s) not in queued  # its first choice by price, in no cluster


def test_the_api_leads_with_the_blocker_and_gives_an_estimate_with_its_basis(blocked, api_as, bob):
    job, running = blocked
    data = api_as(bob).get(f"/api/v1/jobs/{job.public_id}/").json()
    b = data["blocker"]
    assert b["code"] == "NO_CAPACITY" and b["model"] == "a100-80gb"
    assert b["lead"]["model"] == "a100-80gb" and b["lead"]["code"] == "NO_NODE_FITS"
    assert [o["model"] for o in b["others"]] == ["a100-40gb"]
    assert "l40s" in {n["model"] for n in b["never"]}
    assert "requirement not met" in b["never_summary"]
    est = data["start_estimate"]
    # 2 free of the 4 it needs: the queue simulation, run for this job before any refresh
    # stored one, starts it when the running 6-GPU job ends, at its max runtime at the latest.
    ends = running.admitted_at + dt.timedelta(seconds=running.max_runtime_seconds)
    assert est["source"] == "simulation" and est["model"] == "a100-80gb"
    assert dt.datetime.fromisoformat(est["latest"]) == ends
    assert f"once job {str(running.public_id)[:8]} ends" in est["basis"]
    assert "max runtime" in est["basis"]
    listed = api_as(bob).get("/api/v1/jobs/?state=QUEUED").json()["results"]
    assert listed[0]["blocker"]["lead"]["code"] == "NO_NODE_FITS"
    assert "start_estimate" not in listed[0]  # the list stays cheap: one job's page has it


def test_a_placed_job_has_no_blocker_and_no_estimate(blocked, api_as, bob):
    _, running = blocked
    data = api_as(bob).get(f"/api/v1/jobs/{running.public_id}/").json()
    assert data["blocker"] is None and data["start_estimate"] is None


def test_the_schema_documents_the_blocker_and_the_estimate(api_as, bob):
    schema = api_as(bob).get("/api/schema/?format=json").json()
    props = schema["components"]["schemas"]["Job"]["properties"]
    assert "blocker" in props
    detail = schema["components"]["schemas"]["JobDetail"]["properties"]
    assert {"blocker", "start_estimate"} <= set(detail)
    blocker = schema["components"]["schemas"]["Blocker"]["properties"]
    assert {"lead", "others", "never", "never_summary", "model"} <= set(blocker)


def test_no_estimate_says_so_when_there_is_no_basis(bob, vision, pool, quota, api_as):
    pool("east", "t4", nodes=1, gpus=4)
    quota(vision, "t4", nominal=0)  # may borrow, but nobody lends: GPUs free, quota not
    job = submit(bob, name="t4-job", replicas=1, gpus_per_replica=4, min_gpu_memory_gib=None)
    run_cycle()
    data = api_as(bob).get(f"/api/v1/jobs/{job.public_id}/").json()
    assert data["blocker"]["lead"]["code"] == "COHORT_CANNOT_LEND"
    est = data["start_estimate"]
    assert est["at"] is None
    assert est["basis"].startswith(
        "no estimate: even after every running job has ended it would not start"
    )
    assert "cohort has nothing to lend" in est["basis"]


def test_the_job_page_leads_with_the_blocker_and_refreshes_only_while_not_terminal(
    blocked, client, bob
):
    job, _ = blocked
    client.force_login(bob)
    page = client.get(f"/jobs/{job.public_id}/").content.decode()
    assert 'id="blocker"' in page and 'hx-trigger="every 5s"' in page
    # one sentence leads (the closest candidate's note is in it, not said again)
    assert 'id="blocker-sentence"' in page and "a100-80gb" in page
    assert 'id="blocker-others"' in page and "a100-40gb" in page
    assert "can never take it" in page and "(an estimate, not a promise)" in page
    fragment = client.get(f"/jobs/{job.public_id}/?fragment=live").content.decode()
    assert 'id="job-live"' in fragment
    assert 'id="job-facts" hx-swap-oob="true"' in fragment
    assert 'id="job-timeline" hx-swap-oob="true"' in fragment
    assert "<html" not in fragment
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    done = client.get(f"/jobs/{job.public_id}/?fragment=live").content.decode()
    assert "hx-trigger" not in done.split('id="job-facts"')[0]  # the refresh stops


def test_the_job_page_says_how_many_jobs_of_other_teams_are_ahead(
    bob, charlie, vision, language, pool, quota, client
):
    pool("east", "a100-80gb", nodes=2, gpus=8)
    quota(vision, "a100-80gb", nominal=16)
    quota(language, "a100-80gb", nominal=16)
    submit(bob, name="first", replicas=1, gpus_per_replica=8)
    run_cycle()  # Vision now holds 8: Language's jobs come first in line
    older = timezone.now() - dt.timedelta(hours=1)
    for i in range(3):
        theirs = job_submit(
            user=charlie,
            data=job_body(team="language", name=f"l{i}", replicas=1, gpus_per_replica=8),
        ).job
        Job.objects.filter(pk=theirs.pk).update(submitted_at=older + dt.timedelta(seconds=i))
    mine = submit(bob, name="mine", replicas=1, gpus_per_replica=8)
    run_cycle()
    mine.refresh_from_db()
    assert mine.queue_position == 3  # behind Language's two still waiting
    client.force_login(bob)
    page = client.get(f"/jobs/{mine.public_id}/").content.decode()
    assert "Position 3 in line (2 jobs of other teams ahead)" in page
    queue = client.get("/queue/").content.decode()
    assert "2 jobs of other teams ahead" in queue
    assert ">l1</a>" not in queue  # hidden, and said in words only


def _names_in_order(page: str) -> list[str]:
    table = page.split('id="queue-table"')[1].split("</table>")[0]
    return re.findall(r'<a href="/jobs/[^"]+/">([^<]+)</a>', table)


def test_the_queue_shows_how_long_each_job_waits_and_sorts_by_it(bob, vision, pool, quota, client):
    pool("east", "t4", nodes=1, gpus=4)
    quota(vision, "t4", nominal=4)  # each may start some day (no cycle runs here)
    names = ["recent", "oldest", "middle"]
    ages = {"recent": 5, "oldest": 180, "middle": 60}
    for name in names:
        job = submit(bob, name=name, replicas=1, gpus_per_replica=4, min_gpu_memory_gib=None)
        Job.objects.filter(pk=job.pk).update(
            state_changed_at=timezone.now() - dt.timedelta(minutes=ages[name])
        )
    client.force_login(bob)
    page = client.get("/queue/?sort=waiting").content.decode()
    assert _names_in_order(page) == ["oldest", "middle", "recent"]
    assert ">3h 0m</time>" in page and ">1h 0m</time>" in page
    assert 'aria-sort="descending"' in page
    # The sorted column's link reverses it; the other column's sorts by it.
    assert 'href="?sort=-waiting" id="sort-waiting"' in page
    page = client.get("/queue/?sort=-waiting").content.decode()
    assert _names_in_order(page) == ["recent", "middle", "oldest"]
    assert 'aria-sort="ascending"' in page
    # An unknown sort is the line, not an error.
    assert client.get("/queue/?sort=bogus").status_code == 200
    fragment = client.get("/queue/?sort=waiting&fragment=live").content.decode()
    assert "<html" not in fragment
    assert _names_in_order(fragment) == ["oldest", "middle", "recent"]


def test_platform_admins_see_the_oldest_waiting_job_of_each_team(
    bob, charlie, root, vision, language, pool, quota, client
):
    pool("east", "t4", nodes=1, gpus=4)
    for who, team, name, minutes in [
        (bob, "vision", "v-old", 300),
        (bob, "vision", "v-new", 10),
        (charlie, "language", "l-old", 90),
    ]:
        job = job_submit(
            user=who,
            data=job_body(team=team, name=name, gpus_per_replica=4, min_gpu_memory_gib=None),
        ).job
        Job.objects.filter(pk=job.pk).update(
            state_changed_at=timezone.now() - dt.timedelta(minutes=minutes)
        )
    client.force_login(root)
    page = client.get("/queue/?view=oldest").content.decode()
    section = page.split('id="oldest-waiting"')[1].split("</section>")[0]
    assert re.findall(r">([vl]-\w+)</a>", section) == ["v-old", "l-old"]
    assert 'id="queue-table"' not in page  # a view of its own, not the whole line again
    assert ">5h 0m</time>" in section
    client.force_login(bob)
    page = client.get("/queue/?view=oldest").content.decode()
    assert 'id="oldest-waiting"' not in page and "Oldest waiting job of each team" not in page


def test_the_queue_page_costs_the_same_queries_for_3_or_30_jobs(bob, vision, pool, quota, client):
    pool("east", "t4", nodes=1, gpus=4)
    quota(vision, "t4", nominal=4)
    client.force_login(bob)

    def queries_for(n: int) -> int:
        for i in range(n):
            submit(bob, name=f"j{i}", replicas=1, gpus_per_replica=4, min_gpu_memory_gib=None)
        run_cycle()
        with CaptureQueriesContext(connection) as ctx:
            assert client.get("/queue/?fragment=live").status_code == 200
        return len(ctx.captured_queries)

    few = queries_for(3)
    many = queries_for(27)
    assert many == few


def test_the_queue_api_gives_each_job_its_blocker_and_sorts_by_waiting(blocked, api_as, bob):
    job, _ = blocked
    submit(bob, name="newer", replicas=1, gpus_per_replica=4)
    Job.objects.filter(pk=job.pk).update(state_changed_at=timezone.now() - dt.timedelta(hours=2))
    api = api_as(bob)
    line = api.get("/api/v1/queue/?sort=waiting").json()
    assert [e["name"] for e in line] == ["waiting", "newer"]
    assert line[0]["blocker"]["lead"]["model"] == "a100-80gb"
    assert line[1]["blocker"]["lead"] is None  # no cycle has looked at it yet
    assert [e["name"] for e in api.get("/api/v1/queue/?sort=-waiting").json()] == [
        "newer",
        "waiting",
    ]
    bad = api.get("/api/v1/queue/?sort=fastest")
    assert bad.status_code == 400 and "sort" in bad.content.decode()


def test_a_job_cancelled_ahead_moves_everyone_behind_up_at_once(
    bob, charlie, vision, language, pool, quota, client
):
    """Places in line are counted from the cycle's order when read: a cancel ahead shows on
    the next page load, not a cycle later; and a cycle that admits the head rewrites no one
    else's place."""
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=8)
    submit(bob, name="running", replicas=1, gpus_per_replica=8)
    run_cycle()
    line = [submit(bob, name=f"q{i}", replicas=1, gpus_per_replica=8) for i in range(4)]
    run_cycle()
    keys = {j.pk: Job.objects.get(pk=j.pk).queue_order_key for j in line}
    assert [Job.objects.get(pk=j.pk).queue_position for j in line] == [1, 2, 3, 4]
    Job.objects.filter(pk=line[0].pk).update(state=JobState.CANCELLED)
    client.force_login(bob)
    page = client.get(f"/jobs/{line[2].public_id}/").content.decode()
    assert "Position 2 in line" in page
    listed = client.get("/api/v1/jobs/?state=QUEUED").json()["results"]
    assert sorted(j["position"] for j in listed) == [1, 2, 3]
    run_cycle()  # nothing changed ahead of them but the cancel: no key moves
    assert {j.pk: Job.objects.get(pk=j.pk).queue_order_key for j in line[1:]} == {
        j.pk: keys[j.pk] for j in line[1:]
    }
