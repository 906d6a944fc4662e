"""A job dispatched while a cluster that lost its state still deletes its old namespace is
not failed: it waits for the namespace to go, then the repair makes it again.

The soak's "kubesim restarted empty" found it: creates into a namespace being terminated are
refused 403 ("unable to create new content in namespace gpupool because it is being
terminated"), which failed every job dispatched in those seconds SubmitRejected, and one
repair per admission was not enough once the old namespace was finally gone.
"""

from __future__ import annotations

import pytest

from clusters.dispatch import job_dispatch
from portal.models import JobEvent, JobState
from scheduling.models import GpuModel, Quota
from tests.clusters.conftest import state_of

pytestmark = pytest.mark.django_db(transaction=True)


def _reasons(job) -> list[str]:
    return list(
        JobEvent.objects.filter(job_id=job.pk).order_by("id").values_list("reason", flat=True)
    )


def test_a_job_dispatched_while_the_old_namespace_terminates_waits_and_then_runs(
    sim, cluster, admit, vision
):
    # The queue sync needs to know vision may run here.
    Quota.objects.create(team=vision, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=8)
    running = admit(cluster, name="before")
    assert job_dispatch(job_id=running.pk).done
    sim.advance(3)  # its pod runs: the namespace cannot go before the pod has terminated
    assert "gpupool" in sim.lose_state()
    assert (sim.get("namespaces", "gpupool") or {}).get("status", {}).get("phase") == "Terminating"

    job = admit(cluster, name="after")
    for _ in range(4):  # the queue is remade, the namespace still terminates: wait, never fail
        outcome = job_dispatch(job_id=job.pk)
        assert not outcome.done, _reasons(job)
    assert state_of(job) == JobState.ADMITTED
    assert any("being terminated" in m for m in JobEvent.objects.filter(
        job_id=job.pk, reason="DispatchRetry").values_list("message", flat=True))  # fmt: skip

    sim.advance(5)  # the old pods are gone, and with them the namespace
    assert sim.get("namespaces", "gpupool") is None
    for _ in range(3):
        if job_dispatch(job_id=job.pk).done:
            break
    assert state_of(job) == JobState.SUBMITTED, _reasons(job)
    assert "SubmitRejected" not in _reasons(job)
    assert sim.get("namespaces", "gpupool") is not None
