"""Preemption people can live with, through the cycle and the API: a team's minimum runtime,
the pool's budget of preempted GPUs, the grace period on the pods, what the victim's page says,
and the requeue that keeps its submit time."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from clusters.manifests import job_manifest
from portal.jobs.services import job_submit
from portal.jobs.state import preempting_end
from portal.models import Job, JobState
from scheduling.cycle import run_cycle
from scheduling.models import TeamPolicy
from scheduling.preview import Proposal, preview_changes
from tests.clusters.test_volcano_manifest import assert_valid_job
from tests.conftest import job_body

pytestmark = pytest.mark.django_db

A100 = "a100-80gb"


def submit(user, team="vision", name="job", gpus=8):
    body = job_body(team=team, name=name, replicas=1, gpus_per_replica=gpus, gpu_models=[A100])
    body.pop("min_gpu_memory_gib")
    return job_submit(user=user, data=body).job


@pytest.fixture
def borrowed(charlie, vision, language, pool, quota):
    """Language runs an 8-GPU job on Vision's idle quota, started 5 minutes ago."""

    def make(nodes: int = 1, jobs: int = 1) -> list[Job]:
        pool("east", A100, nodes=nodes, gpus=8)
        quota(vision, A100, nominal=8 * nodes)
        quota(language, A100, nominal=0)
        made = [submit(charlie, team="language", name=f"borrower-{i}") for i in range(jobs)]
        run_cycle()
        Job.objects.filter(pk__in=[j.pk for j in made]).update(
            state=JobState.RUNNING, started_at=timezone.now() - dt.timedelta(minutes=5)
        )
        return made

    return make


def test_a_job_within_its_teams_minimum_runtime_is_preempted_only_after_it(
    alice, language, borrowed
):
    (victim,) = borrowed()
    TeamPolicy.objects.create(team=language, min_runtime_minutes=30)
    claimer = submit(alice, name="claimer")
    now = timezone.now()
    assert run_cycle(now=now).preempted == []
    claimer.refresh_from_db()
    assert claimer.pending_reason_code == "MIN_RUNTIME"
    assert "within their team's minimum runtime" in claimer.pending_reason
    later = now + dt.timedelta(minutes=26)  # 31 minutes after the victim started
    assert [r.job for r in preview_changes(Proposal(), now=later).would_preempt] == [
        str(victim.public_id)
    ]
    assert run_cycle(now=later).preempted == [victim.pk]


def test_the_pools_default_minimum_runtime_applies_to_teams_without_their_own(
    alice, borrowed, settings
):
    settings.GPUPOOL_PREEMPTION_MIN_RUNTIME_MINUTES = 10
    borrowed()
    submit(alice, name="claimer")
    assert run_cycle().preempted == []
    assert run_cycle(now=timezone.now() + dt.timedelta(minutes=6)).preempted != []


def test_the_budget_lets_one_reclaim_through_per_cycle(alice, borrowed, settings):
    settings.GPUPOOL_PREEMPTION_BUDGET_GPUS = 8
    victims = borrowed(nodes=2, jobs=2)
    first, second = submit(alice, name="first"), submit(alice, name="second")
    result = run_cycle()
    assert len(result.preempted) == 1 and result.preempted[0] in {v.pk for v in victims}
    second.refresh_from_db()
    assert second.pending_reason_code == "PREEMPTION_BUDGET"
    assert "8 GPUs per cycle" in second.pending_reason
    assert run_cycle().preempted == []  # the first reclaim is still under way
    first.refresh_from_db()
    assert first.pending_reason_code == "PREEMPTING"


def test_the_victims_page_says_who_reclaimed_what_and_it_keeps_its_place_in_line(
    client, alice, charlie, borrowed
):
    (victim,) = borrowed()
    submitted = victim.submitted_at
    submit(alice, name="claimer")
    assert run_cycle().preempted == [victim.pk]
    client.force_login(charlie)
    page = client.get(f"/jobs/{victim.public_id}/").content.decode()
    section = page.split('id="preempted"', 1)[1].split("</section>", 1)[0]
    assert "team vision reclaims its nominal a100-80gb quota" in section
    assert "8 a100-80gb GPUs in east" in section and "SIGTERM" in section
    assert "claimer" not in section  # another team's job is never named
    assert preempting_end(job_id=victim.pk)
    victim.refresh_from_db()
    assert victim.state == JobState.QUEUED and victim.submitted_at == submitted
    assert victim.preemption_count == 1
    timeline = [e.message for e in victim.events.filter(reason="Preempted")]
    assert len(timeline) == 2 and all("team vision reclaims" in m for m in timeline)


def test_the_pods_get_the_teams_grace_period(bob, vision, pool, quota, settings):
    settings.GPUPOOL_TERMINATION_GRACE_SECONDS = 45
    pool("east", A100, nodes=1, gpus=8)
    quota(vision, A100, nominal=8)
    job = submit(bob)
    run_cycle()
    job.refresh_from_db()

    def grace() -> set[int]:
        _, manifest = job_manifest(Job.objects.get(pk=job.pk))
        assert_valid_job(manifest)
        return {
            t["template"]["spec"]["terminationGracePeriodSeconds"]
            for t in manifest["spec"]["tasks"]
        }

    assert grace() == {45}
    TeamPolicy.objects.create(team=vision, termination_grace_seconds=600)
    assert grace() == {600}


def test_team_policies_take_the_preemption_rules_over_the_api(api_as, root, vision):
    client = api_as(root)
    response = client.post(
        "/api/v1/team-policies/",
        {"team": "vision", "min_runtime_minutes": 30, "termination_grace_seconds": 120},
        format="json",
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["min_runtime_minutes"], body["termination_grace_seconds"]) == (30, 120)
    bad = client.post(
        "/api/v1/team-policies/", {"team": "vision", "min_runtime_minutes": -1}, format="json"
    )
    assert bad.status_code == 400 and "min_runtime_minutes" in bad.json()["extra"]["fields"]
    assert TeamPolicy.objects.get(team=vision).min_runtime_minutes == 30


def test_a_claimers_estimate_waits_out_the_victims_minimum_runtime_and_grace_period(
    api_as, alice, language, borrowed, settings
):
    settings.GPUPOOL_TERMINATION_GRACE_SECONDS = 120
    (victim,) = borrowed()  # started 5 minutes ago, expected to run an hour (no history)
    TeamPolicy.objects.create(team=language, min_runtime_minutes=30)
    claimer = submit(alice, name="claimer")
    assert run_cycle().preempted == []
    got = api_as(alice).get(f"/api/v1/jobs/{claimer.public_id}/estimate/").json()
    start = dt.datetime.fromisoformat(got["estimate"]["start_at"])
    victim.refresh_from_db()
    # Reclaimed once its 30 minutes are over, then its pods get their 2 minutes.
    expected = victim.started_at + dt.timedelta(minutes=32)
    assert abs(start - expected) < dt.timedelta(minutes=1), (start, expected)
    assert "preempted to reclaim its GPUs" in got["estimate"]["why"]
