"""The what-if preview against the real database: for each scenario, the preview of a change,
then the change saved through the same services the pages use and a cycle run at the same
instant; the cycle must do exactly what the preview said."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from clusters.models import Cluster
from clusters.registration import cluster_state_set
from portal.jobs.services import job_submit
from portal.models import Job, JobState
from scheduling.cycle import run_cycle
from scheduling.models import Cohort, GpuModel, Quota, TeamPolicy, UsageRecord
from scheduling.preview import (
    ClusterProposal,
    CohortQuotaProposal,
    Preview,
    Proposal,
    QuotaProposal,
    TeamProposal,
    preview_changes,
)
from scheduling.services import cohort_quota_set, pool_cohort, quota_set, team_policy_set
from tests.conftest import job_body

pytestmark = pytest.mark.django_db

A100 = "a100-80gb"


def submit(user, team="vision", **overrides):
    body = job_body(team=team, replicas=1, gpus_per_replica=8, gpu_models=[A100], **overrides)
    body.pop("min_gpu_memory_gib")
    return job_submit(user=user, data=body).job


def public(job: Job) -> str:
    return str(job.public_id)


def cycle_matches(preview: Preview, now: dt.datetime) -> None:
    """Run the cycle at the preview's instant and check it did what the preview said."""
    result = run_cycle(now=now)
    assert result.ran
    started = {public(j) for j in Job.objects.filter(pk__in=result.admitted)}
    assert started == {r.job for r in preview.would_start}
    preempted = {public(j) for j in Job.objects.filter(pk__in=result.preempted)}
    assert preempted == {r.job for r in preview.would_preempt}
    for row in preview.newly_blocked:
        job = Job.objects.get(public_id=row.job)
        assert (job.state, job.pending_reason_code) == (JobState.QUEUED, row.code)


def test_raising_a_quota_starts_the_jobs_the_preview_names(bob, root, vision, pool, quota):
    pool("east", A100, nodes=2, gpus=8)
    quota(vision, A100, nominal=8, borrowing_limit=0)
    first, second = submit(bob, name="first"), submit(bob, name="second")
    run_cycle()
    second.refresh_from_db()
    assert second.pending_reason_code == "QUOTA_EXHAUSTED"
    now = timezone.now()

    preview = preview_changes(
        Proposal(quotas=(QuotaProposal(team="vision", model=A100, nominal=16),)), now=now
    )

    assert [(r.job, r.new) for r in preview.would_start] == [(public(second), True)]
    assert preview.would_start[0].name == "second"
    assert preview.would_preempt == [] and preview.newly_blocked == []
    quota_set(
        team=vision, model=GpuModel.objects.get(key=A100), nominal=16, borrowing_limit=0, by=root
    )
    cycle_matches(preview, now)
    assert first  # admitted in the first cycle, untouched


def test_moving_a_nominal_reclaims_from_the_team_that_now_borrows(
    alice, charlie, root, vision, language, pool, quota
):
    pool("east", A100, nodes=1, gpus=8)
    quota(vision, A100, nominal=8)
    quota(language, A100, nominal=0)
    model = GpuModel.objects.get(key=A100)
    borrower = submit(alice, name="borrower")
    run_cycle()
    borrower.refresh_from_db()
    assert borrower.state == JobState.ADMITTED  # within Vision's nominal: nobody may reclaim
    claimer = submit(charlie, team="language", name="claimer")
    now = timezone.now()
    assert preview_changes(Proposal(), now=now).would_preempt == []

    proposal = Proposal(
        quotas=(
            QuotaProposal(team="language", model=A100, nominal=8),
            QuotaProposal(team="vision", model=A100, nominal=0),
        )
    )
    preview = preview_changes(proposal, now=now)

    assert [(r.job, r.team, r.for_team, r.gpus) for r in preview.would_preempt] == [
        (public(borrower), "vision", "language", 8)
    ]
    assert [(t.team, t.jobs, t.gpus) for t in preview.preempted_by_team] == [("vision", 1, 8)]
    assert [(r.job, r.code, r.was) for r in preview.newly_blocked] == [
        (public(claimer), "PREEMPTING", "COHORT_HAS_NOTHING_TO_LEND")
    ]
    quota_set(team=language, model=model, nominal=8, by=root)
    quota_set(team=vision, model=model, nominal=0, by=root)
    cycle_matches(preview, now)


def test_draining_a_cluster_blocks_what_would_start_there(bob, vision, pool, quota):
    pool("east", A100, nodes=1, gpus=8)
    quota(vision, A100, nominal=16)
    job = submit(bob, name="waiting")
    now = timezone.now()

    preview = preview_changes(
        Proposal(clusters=(ClusterProposal(cluster="east", state="draining"),)), now=now
    )

    assert preview.would_start == []
    assert [(r.job, r.code, r.was) for r in preview.newly_blocked] == [
        (public(job), "CLUSTER_DRAINING", "start")
    ]
    east = next(g for g in preview.guarantees if g.model == A100)
    assert (east.capacity_now, east.capacity, east.over_now, east.over) == (8, 0, 8, 16)
    cluster_state_set(cluster=Cluster.objects.get(name="east"), state="draining")
    cycle_matches(preview, now)


def used(team, hours: float) -> None:
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    model = GpuModel.objects.get(key=A100)
    UsageRecord.objects.create(
        team=team, gpu_model=model, hour=hour, gpu_hours=hours, weighted_gpu_hours=hours
    )


def test_a_heavier_weight_changes_which_team_starts_first(
    bob, charlie, root, vision, language, pool, quota
):
    pool("east", A100, nodes=1, gpus=8)
    quota(vision, A100, nominal=0)
    quota(language, A100, nominal=0)
    cohort_quota_set(cohort=pool_cohort(), model=GpuModel.objects.get(key=A100), nominal=8, by=root)
    used(vision, 3000)  # vision has used three times what language has: language goes first
    used(language, 1000)
    vis = submit(bob, name="vis")
    lang = submit(charlie, team="language", name="lang")
    now = timezone.now()
    baseline = preview_changes(Proposal(), now=now)
    assert [r.job for r in baseline.would_start] == [public(lang)]

    preview = preview_changes(Proposal(teams=(TeamProposal(team="vision", weight=4),)), now=now)

    assert [(r.job, r.new) for r in preview.would_start] == [(public(vis), True)]
    assert [(r.job, r.code, r.was) for r in preview.newly_blocked] == [
        (public(lang), "COHORT_HAS_NOTHING_TO_LEND", "start")
    ]
    team_policy_set(team=vision, by=root, weight=4.0)
    cycle_matches(preview, now)


def test_moving_a_team_into_a_cohort_with_quota_of_its_own_lets_it_borrow(
    bob, root, vision, pool, quota
):
    pool("east", A100, nodes=1, gpus=8)
    quota(vision, A100, nominal=0)
    research = Cohort.objects.create(name="Research", slug="research")
    job = submit(bob, name="borrows")
    run_cycle()
    job.refresh_from_db()
    assert job.pending_reason_code == "COHORT_HAS_NOTHING_TO_LEND"
    now = timezone.now()

    preview = preview_changes(
        Proposal(
            teams=(TeamProposal(team="vision", cohort="research"),),
            cohort_quotas=(CohortQuotaProposal(cohort="research", model=A100, nominal=8),),
        ),
        now=now,
    )

    assert [(r.job, r.new) for r in preview.would_start] == [(public(job), True)]
    cohort_quota_set(cohort=research, model=GpuModel.objects.get(key=A100), nominal=8, by=root)
    team_policy_set(team=vision, by=root, cohort=research)
    cycle_matches(preview, now)


def test_the_preview_writes_nothing(bob, vision, pool, quota):
    pool("east", A100, nodes=1, gpus=8)
    quota(vision, A100, nominal=8)
    job = submit(bob)
    preview_changes(Proposal(quotas=(QuotaProposal(team="vision", model=A100, nominal=0),)))
    job.refresh_from_db()
    assert (job.state, job.pending_reason_code, job.queue_position) == (JobState.QUEUED, "", None)


def test_the_quota_page_previews_staged_cells_for_platform_admins_only(
    client, root, bob, vision, pool, quota
):
    pool("east", A100, nodes=1, gpus=8)
    quota(vision, A100, nominal=0, borrowing_limit=0)
    job = submit(bob, name="needs-quota")
    form = {f"n:vision:{A100}": "8", f"b:vision:{A100}": "0"}
    form |= {f"was-n:vision:{A100}": "0", f"was-b:vision:{A100}": "0"}
    client.force_login(bob)
    assert client.post("/quotas/preview/", form).status_code == 403
    client.force_login(root)
    page = client.get("/quotas/").content.decode()
    assert 'hx-post="/quotas/preview/"' in page and 'id="quota-preview"' in page
    fragment = client.post("/quotas/preview/", form).content.decode()
    assert "needs-quota" in fragment and "only with these changes" in fragment
    assert f'href="/jobs/{job.public_id}/"' in fragment
    bad = client.post("/quotas/preview/", {**form, f"n:vision:{A100}": "-3"})
    assert bad.status_code == 400 and "Must be a whole number" in bad.content.decode()
    assert Quota.objects.get(team=vision).nominal == 0


def test_the_team_policy_form_previews_and_saves_a_weight_and_a_cohort(
    client, root, bob, vision, pool, quota
):
    pool("east", A100, nodes=1, gpus=8)
    quota(vision, A100, nominal=0)
    Cohort.objects.create(name="Research", slug="research")
    cohort_quota_set(
        cohort=Cohort.objects.get(slug="research"),
        model=GpuModel.objects.get(key=A100),
        nominal=8,
        by=root,
    )
    submit(bob, name="borrows")
    client.force_login(root)
    form = {"w:vision": "2", "was-w:vision": "1", "c:vision": "research", "was-c:vision": "default"}
    fragment = client.post("/quotas/preview/", form).content.decode()
    assert "borrows" in fragment and "only with these changes" in fragment
    assert client.post("/quotas/teams/", form).status_code == 302
    policy = TeamPolicy.objects.get(team=vision)
    assert (policy.weight, policy.cohort.slug) == (2.0, "research")
    bad = client.post("/quotas/preview/", {**form, "c:vision": "ghosts"})
    assert bad.status_code == 400 and "No cohort" in bad.content.decode()


def test_the_drain_confirmation_shows_what_the_next_cycle_would_block(
    client, root, bob, vision, pool, quota
):
    pool("east", A100, nodes=1, gpus=8)
    quota(vision, A100, nominal=8)
    submit(bob, name="would-start")
    client.force_login(root)
    page = client.get("/clusters/east/state/draining/").content.decode()
    assert "What the next cycle would do" in page
    blocked = page.split("data-preview-blocked", 1)[1].split("</ul>", 1)[0]
    assert "would-start" in blocked and "CLUSTER_DRAINING" in blocked
    assert "it would start" in blocked
