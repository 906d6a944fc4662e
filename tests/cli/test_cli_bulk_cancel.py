"""``gpupool cancel`` takes several jobs and one reason: a team admin cancels their team's
jobs in one command; another team's job is refused (exit 3) unnamed, the others go on."""

from __future__ import annotations

import json

import pytest

from portal.models import Job, JobState, Team
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_team_admin_cancels_several_jobs_with_one_reason(cli, alice, bob, vision, charlie):
    ours = [JobFactory(team=vision, owner=bob, name=f"bert-{i}") for i in range(2)]
    theirs = JobFactory(team=Team.objects.get(slug="language"), owner=charlie, name="lang")
    done = cli(
        alice,
        "cancel",
        str(ours[0].public_id),
        str(theirs.public_id),
        str(ours[1].public_id),
        "--reason",
        "maintenance tonight",
        "--json",
    )
    assert done.exit_code == 3, done.output  # Language's job: not one of her teams'
    assert [j["name"] for j in json.loads(done.stdout)] == ["bert-0", "bert-1"]
    assert f"{theirs.public_id}: error" in done.stderr and "lang" not in done.stderr
    for job in ours:
        job.refresh_from_db()
        assert (job.state, job.cancel_reason) == (JobState.CANCELLED, "maintenance tonight")
    assert Job.objects.get(pk=theirs.pk).state == JobState.QUEUED
