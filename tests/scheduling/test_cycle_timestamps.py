"""A job submitted while a cycle loads the queue is admitted no earlier than it was submitted.

The cycle reads ``now`` before it loads its snapshot; a submit that commits during the load is
in the snapshot, stamped later than that ``now``. Its admission must still read after its
submit: ``admitted_at ≥ submitted_at`` and "Admitted" after "Submitted" on its timeline (a
queue wait is never negative, and an audit replaying events never sees a quota overrun that
did not happen).
"""

from __future__ import annotations

from typing import Any

import pytest

from portal.jobs.services import job_submit
from portal.models import Job, JobEvent, JobState
from scheduling import cycle
from scheduling.cycle import run_cycle
from tests.conftest import job_body

pytestmark = pytest.mark.django_db


def test_a_job_submitted_during_the_cycles_load_is_not_admitted_before_its_submit(
    bob, vision, pool, quota, monkeypatch
):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=8)
    early = job_submit(user=bob, data=job_body(gpus_per_replica=1)).job
    late: list[Job] = []
    load = cycle.snapshot_load

    def a_submit_commits_during_the_load(**kwargs: Any) -> Any:
        late.append(job_submit(user=bob, data=job_body(gpus_per_replica=1)).job)
        return load(**kwargs)

    monkeypatch.setattr(cycle, "snapshot_load", a_submit_commits_during_the_load)
    result = run_cycle()
    assert sorted(result.admitted) == sorted([early.pk, late[0].pk])
    for job in (early, late[0]):
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED
        assert job.admitted_at >= job.submitted_at, "a negative queue wait"
        admitted = JobEvent.objects.get(job=job, to_state=JobState.ADMITTED).created_at
        submitted = JobEvent.objects.get(job=job, reason="Submitted").created_at
        assert submitted <= admitted == job.admitted_at == job.state_changed_at
