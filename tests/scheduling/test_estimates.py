"""Start estimates over REST and on the job rows: the forward simulation fed from the
database (learned runtimes, running jobs' expected ends), tenancy, validation, and the
cycle's request for a refresh."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.cache import cache
from django.utils import timezone

from dashboards.metrics import metrics_cache_forget
from dashboards.models import StartEstimateRecord
from portal.jobs.services import job_submit
from portal.jobs.state import job_transition
from portal.models import HOLDING_STATES, Job, JobState
from scheduling import estimates
from scheduling.cycle import run_cycle
from scheduling.tasks import estimates_refresh_now
from tests.conftest import job_body
from tests.dashboards.conftest import kubesim_cluster  # noqa: F401  (fixture)
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

HOLDING = tuple(HOLDING_STATES)
A100 = {"gpu_models": ["a100-80gb"], "min_gpu_memory_gib": None}


@pytest.fixture
def east(kubesim_cluster):  # noqa: F811
    """kubesim's small pool: 2 x 8 A100, an A100 with 4 whole GPUs and MIG slices,
    2 x 4 V100, 3 x 1 T4."""
    return kubesim_cluster("east")


@pytest.fixture(autouse=True)
def _no_refresh_in_flight():
    cache.delete_many([estimates.REQUESTED_KEY, estimates.RUNNING_KEY])


def finished_runs(team, owner, minutes: int, n: int = 3, name: str = "bert-{}") -> None:
    """``n`` finished training runs of ``minutes`` each, named like ``bert-1``."""
    end = timezone.now() - dt.timedelta(hours=1)
    for i in range(n):
        JobFactory(
            team=team,
            owner=owner,
            name=name.format(i),
            state=JobState.SUCCEEDED,
            started_at=end - dt.timedelta(minutes=minutes),
            finished_at=end,
        )


def full_a100s(bob, vision, quota) -> list[Job]:
    """Two 8-GPU jobs fill the two 8-GPU A100 nodes; a third waits."""
    quota(vision, "a100-80gb", nominal=24)
    jobs = [
        job_submit(
            user=bob, data=job_body(name=f"bert-{i}", replicas=1, gpus_per_replica=8, **A100)
        ).job
        for i in range(3)
    ]
    assert len(run_cycle().admitted) == 2
    return jobs


def test_a_queued_job_starts_when_a_running_one_is_expected_to_end(
    api_as, bob, vision, quota, east
):
    finished_runs(vision, bob, minutes=30)
    first, _, third = full_a100s(bob, vision, quota)
    got = api_as(bob).get(f"/api/v1/jobs/{third.public_id}/estimate/").json()
    start = dt.datetime.fromisoformat(got["estimate"]["start_at"])
    first.refresh_from_db()
    # The running ones are expected to run 30 min (the median of bert-* runs), not 1 h.
    assert abs(start - (first.admitted_at + dt.timedelta(minutes=30))) < dt.timedelta(minutes=2)
    assert got["estimate"]["model"] == "a100-80gb" and got["estimate"]["cluster"]
    assert "median of 3 finished runs" in got["estimate"]["why"]
    assert "not a promise" in got["estimate"]["why"]
    assert got["expected_runtime_minutes"] == 30
    assert "this team's training jobs like it" in got["runtime_basis"]
    labels = [a["label"] for a in got["alternatives"]]
    assert labels[0] == "NVIDIA A100-SXM4-80GB"
    assert got["alternatives"][0]["start_at"] == got["estimate"]["start_at"]


def test_a_spec_not_yet_submitted_gets_alternatives_and_nothing_is_stored(
    api_as, bob, vision, quota, east
):
    full_a100s(bob, vision, quota)
    quota(vision, "v100-32gb", nominal=8)
    before = Job.objects.count()
    body = job_body(replicas=2, gpus_per_replica=4, gpu_models=["a100-80gb", "v100-32gb"])
    body["min_gpu_memory_gib"] = None
    got = api_as(bob).post("/api/v1/jobs/estimate/", body, format="json")
    assert got.status_code == 200, got.content
    alts = {a["only_model"] or a["label"]: a for a in got.json()["alternatives"]}
    assert alts["v100-32gb"]["starts"] == "now"  # 2 x 4 on the two idle V100 nodes
    assert alts["a100-80gb"]["start_at"] is not None and alts["a100-80gb"]["starts"] != "now"
    assert alts["1 replica instead of 2"]["starts"] == "now"
    assert got.json()["estimate"]["model"] == "v100-32gb"  # the engine's fallback
    assert Job.objects.count() == before
    # As asked, it starts now on the V100s: nothing is sooner, so nothing is marked so, and
    # the A100 row (later) keeps its place among the rest.
    assert [a["sooner"] for a in got.json()["alternatives"]] == [False, False, False]


def test_alternatives_are_models_the_pool_has_the_sooner_ones_first(
    api_as, bob, vision, quota, east
):
    """The A100s have no two nodes with 4 free; the list also names the H100, which no
    cluster has: only the pool's models are offered, and the one that starts sooner (the
    V100s, free now) comes first."""
    full_a100s(bob, vision, quota)
    quota(vision, "v100-32gb", nominal=8)
    body = job_body(
        replicas=2,
        gpus_per_replica=4,
        gpu_models=["a100-80gb", "h100-sxm", "v100-32gb"],
        min_gpu_memory_gib=None,
    )
    body["allow_fallback"] = False  # as asked: the first choice only
    body["selection_policy"] = "ordered"
    got = api_as(bob).post("/api/v1/jobs/estimate/", body, format="json").json()
    alts = got["alternatives"]
    offered = [a["only_model"] for a in alts if a["only_model"]]
    assert sorted(offered) == ["a100-80gb", "v100-32gb"]
    assert got["estimate"]["model"] == "a100-80gb" and got["estimate"]["starts"] != "now"
    assert (alts[0]["only_model"], alts[0]["starts"], alts[0]["sooner"]) == (
        "v100-32gb",
        "now",
        True,
    )
    a100 = next(a for a in alts if a["only_model"] == "a100-80gb")
    assert not a100["sooner"] and alts.index(a100) > 0


def test_a_bad_spec_is_refused_naming_the_field(api_as, bob, east):
    got = api_as(bob).post("/api/v1/jobs/estimate/", job_body(gpus_per_replica=0), format="json")
    assert got.status_code == 400
    assert "gpus_per_replica" in got.json()["extra"]["fields"]


def test_another_teams_job_and_team_are_not_found(api_as, bob, charlie, vision, quota, east):
    *_, third = full_a100s(bob, vision, quota)
    assert api_as(charlie).get(f"/api/v1/jobs/{third.public_id}/estimate/").status_code == 404
    spec = api_as(charlie).post("/api/v1/jobs/estimate/", job_body(), format="json")
    assert spec.status_code == 404


def test_an_estimate_that_cannot_be_made_says_why(api_as, bob, vision, quota, east):
    quota(vision, "a100-80gb", nominal=32)
    body = job_body(replicas=3, gpus_per_replica=8, **A100)
    got = api_as(bob).post("/api/v1/jobs/estimate/", body, format="json").json()
    assert got["estimate"]["start_at"] is None
    assert got["estimate"]["why"].startswith("no estimate: even after every running job")


def test_a_job_no_longer_queued_has_no_estimate_and_says_so(api_as, bob, vision, quota, east):
    first, *_ = full_a100s(bob, vision, quota)
    got = api_as(bob).get(f"/api/v1/jobs/{first.public_id}/estimate/").json()
    assert got["estimate"] is None and "not queued" in got["why"]


def test_the_cycle_asks_for_a_refresh_which_stores_the_estimates(
    bob, vision, quota, east, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        first, _, third = full_a100s(bob, vision, quota)
    assert cache.get(estimates.REQUESTED_KEY)  # the cycle's step 6, on commit
    with django_capture_on_commit_callbacks(execute=True):  # the range goes to its record
        assert estimates_refresh_now() == 1  # the one queued job
    third.refresh_from_db()
    first.refresh_from_db()
    max_runtime = dt.timedelta(seconds=first.max_runtime_seconds)  # no runs to learn from
    # Nothing learned: not the max runtime as a point, but a wide range up to it, said so.
    assert first.admitted_at < third.estimated_start_at < first.admitted_at + max_runtime
    assert third.estimate_model == "a100-80gb" and "no finished runs" in third.estimate_note
    record = StartEstimateRecord.objects.get(job=third)
    assert record.first_at == third.estimated_start_at and record.runs == 0
    assert record.latest == first.admitted_at + max_runtime
    assert record.earliest is not None and record.earliest < record.first_at
    assert estimates_refresh_now() == 0  # unchanged: nothing written
    cache.add(estimates.RUNNING_KEY, 1)
    assert estimates_refresh_now() is None  # single flight


def test_the_job_api_gives_the_simulations_estimate_before_and_after_it_is_stored(
    api_as, bob, vision, quota, east
):
    """One estimator wherever it is read: ``GET /api/v1/jobs/{id}/`` (and the CLI's
    ``show``) gives the refresh's stored estimate once it exists and, before, the same
    simulation run for the job alone: the two agree."""
    *_, third = full_a100s(bob, vision, quota)
    before = api_as(bob).get(f"/api/v1/jobs/{third.public_id}/").json()["start_estimate"]
    assert before["source"] == "simulation"
    assert before["model"] == "a100-80gb" and before["cluster"]
    assert "max runtime" in before["basis"]
    assert estimates_refresh_now() == 1
    third.refresh_from_db()
    after = api_as(bob).get(f"/api/v1/jobs/{third.public_id}/").json()["start_estimate"]
    assert after["source"] == "simulation"
    assert dt.datetime.fromisoformat(after["at"]) == third.estimated_start_at
    assert (after["model"], after["cluster"]) == ("a100-80gb", third.estimate_cluster)
    assert after["basis"] == third.estimate_note and "max runtime" in after["basis"]
    assert (after["at"], after["basis"], after["cluster"]) == (
        before["at"],
        before["basis"],
        before["cluster"],
    )


def test_the_pages_fragments_keep_to_the_team_and_name_what_to_fix(
    client, bob, charlie, vision, quota, east
):
    *_, third = full_a100s(bob, vision, quota)
    client.force_login(charlie)
    assert client.get(f"/jobs/{third.public_id}/estimate/").status_code == 404
    client.force_login(bob)
    page = client.get(f"/jobs/{third.public_id}/estimate/").content.decode()
    assert "an estimate, not a promise" in page
    # Its one alternative (A100 alone) starts no sooner: one folded line, no table.
    assert 'id="estimate-alternatives-table"' not in page
    assert "No other way to ask starts sooner: NVIDIA A100-SXM4-80GB (in ~" in page
    bad = client.get("/jobs/new/estimate/?team=vision&replicas=1&gpus_per_replica=0")
    assert "No estimate yet:" in bad.content.decode()
    assert "gpus_per_replica" in bad.content.decode()
    other = client.get("/jobs/new/estimate/?team=language&replicas=1&gpus_per_replica=1")
    assert "No estimate yet" in other.content.decode()


def test_a_queued_job_shows_a_range_and_its_first_estimate_is_compared_with_its_start(
    api_as, client, bob, root, vision, quota, east, settings, django_capture_on_commit_callbacks
):
    """The refresh (not the submit) keeps each job's first estimate; once the job starts,
    the platform admins' calibration page and ``/metrics`` compare it with the start."""
    finished_runs(vision, bob, minutes=30, n=12)
    first, _, third = full_a100s(bob, vision, quota)
    assert not StartEstimateRecord.objects.exists()  # nothing written by the submit
    with django_capture_on_commit_callbacks(execute=True):
        estimates_refresh_now()
    got = api_as(bob).get(f"/api/v1/jobs/{third.public_id}/").json()["start_estimate"]
    earliest, likely, latest = (
        dt.datetime.fromisoformat(got[k]) for k in ("earliest", "most_likely", "latest")
    )
    assert timezone.now() - dt.timedelta(seconds=5) <= earliest < likely < latest
    assert got["comparable_runs"] == 12 and got["confidence"] == 0.9 and not got["unknown"]
    assert got["summary"].startswith("between ") and "12 comparable runs" in got["summary"]
    assert "most likely" in got["summary"]
    # The queue, in the API and on the page, says the same.
    row = next(e for e in api_as(bob).get("/api/v1/queue/").json() if e["name"] == "bert-2")
    assert row["start_estimate"]["summary"] == got["summary"]
    client.force_login(bob)
    assert got["summary"] in client.get("/queue/").content.decode()
    assert got["summary"] in client.get(f"/jobs/{third.public_id}/").content.decode()
    # The job it waits for ends; the next cycle starts it; the next refresh marks its record.
    assert job_transition(
        job_id=first.pk, expected=HOLDING, to=JobState.FAILED, reason="test", message="ended"
    )
    assert run_cycle().admitted
    with django_capture_on_commit_callbacks(execute=True):
        estimates_refresh_now()
    record = StartEstimateRecord.objects.get(job=third)
    third.refresh_from_db()
    assert record.started_at == third.admitted_at
    assert record.first_at == likely
    # Platform admins only.
    assert client.get("/pool/estimates/").status_code == 403
    client.force_login(root)
    page = client.get("/pool/estimates/").content.decode()
    assert 'data-bucket="every start"' in page and "<td>1</td>" in page
    settings.GPUPOOL_METRICS_TOKEN = "t0ken"
    metrics_cache_forget()
    metrics = client.get(
        "/metrics", REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer t0ken"
    ).content.decode()
    assert 'gpupool_start_estimate_error_seconds_bucket{le="+Inf"} 1.0' in metrics
    assert "gpupool_start_estimate_inside_range_ratio" in metrics
