"""``jobs_update_rows`` writes each row's own values, whether a field travels as itself or, when
it repeats, as an index into its distinct values (the estimates' notes)."""

from __future__ import annotations

import pytest

from portal.jobs.rowlock import jobs_update_rows
from portal.models import Job, JobState
from tests.factories import JobFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def _queued(n: int) -> list[int]:
    team, owner = TeamFactory(), UserFactory()
    return sorted(JobFactory(team=team, owner=owner, state=JobState.QUEUED).pk for _ in range(n))


def test_repeated_and_unique_values_each_land_on_their_own_row():
    ids = _queued(40)
    messages = ["waits for quota: 8 of 8 used", "no cluster has room", "née à Zürich ✓"]
    rows = [
        {
            "id": pk,
            "estimate_note": messages[i % 3],  # repeats: sent once each
            "volcano_job_name": f"name-{i}",  # all distinct: sent as themselves
            "dispatch_attempts": i + 1,
            "cancel_reason": "" if i % 4 else "by hand",
            "estimated_start_at": None,
        }
        for i, pk in enumerate(ids)
    ]
    assert jobs_update_rows(rows, where={"state": JobState.QUEUED}) == 40

    stored = {
        j["id"]: j
        for j in Job.objects.filter(pk__in=ids).values(
            "id",
            "estimate_note",
            "volcano_job_name",
            "dispatch_attempts",
            "cancel_reason",
            "estimated_start_at",
        )
    }
    assert stored == {row["id"]: row for row in rows}


def test_rows_not_matching_the_condition_keep_their_values():
    ids = _queued(12)
    Job.objects.filter(pk=ids[0]).update(state=JobState.ADMITTED, estimate_note="was")
    rows = [{"id": pk, "estimate_note": "same for all"} for pk in ids]
    assert jobs_update_rows(rows, where={"state": JobState.QUEUED}) == 11
    assert Job.objects.get(pk=ids[0]).estimate_note == "was"
    assert set(Job.objects.filter(pk__in=ids[1:]).values_list("estimate_note", flat=True)) == {
        "same for all"
    }
