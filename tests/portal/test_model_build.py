"""``portal.db.model_build`` builds what the model's constructor builds: the submit path relies
on it for every job and event it inserts."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Model
from django.utils import timezone

from portal.db import model_build
from portal.models import Job, JobEvent, JobState
from tests.factories import TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def _fields(obj: Model) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def test_a_job_built_fast_equals_one_from_the_constructor_but_for_its_own_public_id():
    team, owner, now = TeamFactory(), UserFactory(), timezone.now()
    values = dict(
        team=team,
        owner=owner,
        name="resnet",
        image="python:3.11",
        command=["python"],
        state=JobState.QUEUED,
        state_changed_at=now,
        submitted_at=now,
    )
    fast, slow = model_build(Job, **values), Job(**values)
    built, expected = _fields(fast), _fields(slow)
    assert built.pop("public_id") != expected.pop("public_id")  # a new uuid4 each
    assert built == expected
    assert fast.team is team and fast.owner is owner  # cached: no query to read them back
    assert fast._state.adding and fast._state.db is None
    another = model_build(Job, **values)
    assert another.env is not fast.env  # mutable defaults are not shared between instances


def test_a_built_event_saves_and_reads_back(bob):
    job = model_build(
        Job,
        team=TeamFactory(),
        owner=bob,
        name="j",
        image="i:1",
        cpu_millicores=1000,
        memory_mib=1024,
        max_runtime_seconds=60,
    )
    job.state_changed_at = job.submitted_at = timezone.now()
    job.save()
    event = model_build(
        JobEvent, job=job, created_at=timezone.now(), to_state="QUEUED", reason="Submitted"
    )
    event.save()
    stored = JobEvent.objects.get(pk=event.pk)
    assert (stored.job_id, stored.reason, stored.from_state) == (job.pk, "Submitted", "")


def test_an_unknown_field_is_refused_as_the_constructor_does():
    with pytest.raises(TypeError, match="unexpected keyword 'colour'"):
        model_build(Job, colour="red")


def test_a_row_inserted_with_its_empty_values_written_as_literals_reads_back_the_same(bob):
    """``insert_with_child`` writes NULL, '', 0, true and false into the SQL itself."""
    from portal.db import insert_with_child

    now = timezone.now()
    job = model_build(
        Job,
        team=TeamFactory(),
        owner=bob,
        name="literals",
        image="i:1",
        cpu_millicores=0,  # 0
        memory_mib=1024,
        max_runtime_seconds=60,
        requires_bf16=True,  # true
        allow_fallback=False,  # false
        cancel_reason="",  # ''
        port=None,  # NULL
        state=JobState.QUEUED,
        state_changed_at=now,
        submitted_at=now,
    )
    event = model_build(JobEvent, created_at=now, to_state="QUEUED", reason="Submitted")
    insert_with_child(job, event, fk="job")
    stored = Job.objects.get(pk=job.pk)
    assert _fields(stored) == _fields(job)
    assert JobEvent.objects.get(job=job).reason == "Submitted"
