"""``jobs_update_rows`` writes each row's own values, whether a field travels as itself or, when
it repeats, as an index into its distinct values (the cycle's waiting reasons)."""

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
            "pending_reason": messages[i % 3],  # repeats: sent once each
            "pending_reason_code": f"CODE_{i}",  # all distinct: sent as themselves
            "queue_position": i + 1,
            "pending_model": "" if i % 4 else "a100-80gb",
            "pending_notes_id": None,
        }
        for i, pk in enumerate(ids)
    ]
    assert jobs_update_rows(rows, where={"state": JobState.QUEUED}) == 40

    stored = {
        j["id"]: j
        for j in Job.objects.filter(pk__in=ids).values(
            "id",
            "pending_reason",
            "pending_reason_code",
            "queue_position",
            "pending_model",
            "pending_notes_id",
        )
    }
    assert stored == {row["id"]: row for row in rows}


def test_rows_not_matching_the_condition_keep_their_values():
    ids = _queued(12)
    Job.objects.filter(pk=ids[0]).update(state=JobState.ADMITTED, pending_reason="was")
    rows = [{"id": pk, "pending_reason": "same for all"} for pk in ids]
    assert jobs_update_rows(rows, where={"state": JobState.QUEUED}) == 11
    assert Job.objects.get(pk=ids[0]).pending_reason == "was"
    assert set(Job.objects.filter(pk__in=ids[1:]).values_list("pending_reason", flat=True)) == {
        "same for all"
    }
