"""The last cycle's waits beside the jobs (``portal.jobs.waits``, ``JobWait``): each job reads
back its own reason and place in line, whether a value repeats across the queue or not, and
only while it is queued."""

from __future__ import annotations

import pytest

from portal.jobs.waits import WaitRow, waits_clear, waits_prune, waits_write
from portal.models import Job, JobState, JobWait, PendingNotes
from tests.factories import JobFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def _queued(n: int) -> list[int]:
    team, owner = TeamFactory(), UserFactory()
    return sorted(JobFactory(team=team, owner=owner, state=JobState.QUEUED).pk for _ in range(n))


def _rows(ids: list[int], reasons: list[str], notes: str | None = None) -> list[WaitRow]:
    return [
        WaitRow(pk, f"CODE_{i % 2}", reasons[i % len(reasons)], i + 1, notes, "a100-80gb")
        for i, pk in enumerate(ids)
    ]


def test_each_job_reads_back_its_own_wait_whether_values_repeat_or_not():
    ids = _queued(30)
    PendingNotes.objects.create(key="k" * 32, notes=[["a100-80gb", "NO_CAPACITY", "full", "lead"]])
    reasons = ["waits for quota: 8 of 8 used", "née à Zürich ✓"] + [f"only {i}" for i in range(5)]
    rows = _rows(list(reversed(ids)), reasons, notes="k" * 32)  # any order in, id order kept
    assert waits_write(rows) == 30
    for row in rows:
        job = Job.objects.select_related("wait__notes").get(pk=row.job_id)
        assert (job.pending_reason_code, job.pending_reason, job.queue_position) == row[1:4]
        assert job.pending_model == "a100-80gb"
        assert job.pending_notes.notes[0][1] == "NO_CAPACITY"


def test_a_second_write_replaces_the_first_in_place():
    ids = _queued(10)
    waits_write(_rows(ids, ["first words"]))
    waits_write(_rows(ids[:4], ["second words"]))
    reasons = dict(JobWait.objects.values_list("job_id", "reason"))
    assert [reasons[pk] for pk in ids] == ["second words"] * 4 + ["first words"] * 6
    assert JobWait.objects.count() == 10


def test_a_job_out_of_the_queue_shows_no_wait_and_its_row_goes():
    ids = _queued(3)
    waits_write(_rows(ids, ["waiting"]))
    Job.objects.filter(pk=ids[0]).update(state=JobState.CANCELLED)
    cancelled = Job.objects.get(pk=ids[0])
    assert (cancelled.pending_reason, cancelled.queue_position, cancelled.status_reason) == (
        "",
        None,
        "",
    )
    assert waits_prune() == 1
    assert waits_clear([ids[1]]) == 1
    assert list(JobWait.objects.values_list("job_id", flat=True)) == [ids[2]]


def test_a_job_no_cycle_has_seen_reads_as_unranked():
    job = Job.objects.get(pk=_queued(1)[0])
    assert (job.pending_reason_code, job.queue_position, job.pending_notes) == ("", None, None)
