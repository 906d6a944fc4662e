"""One cluster that hangs never holds every worker slot: the other clusters' jobs go on.

Creates on cluster A stall past the client's timeout; a worker with four slots gets six of
A's dispatches and then one for cluster B. Without a bound, A's tasks held all four slots and
B's job waited for A's timeouts; with at most half the slots per cluster, B's job is submitted
while A's creates are still hanging.
"""

from __future__ import annotations

import pytest

from kubesim import KubeSim
from portal.models import JobEvent, JobState
from tests.clusters.conftest import SMALL, TIMEOUT_SECONDS, dispatch, wait_for, wait_state

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def other_sim():
    with KubeSim(SMALL, clock_speed=0) as server:
        yield server


def test_a_hanging_cluster_does_not_delay_another_clusters_dispatch(
    sim, cluster, other_sim, register, admit, private_worker
):
    from clusters.inventory import inventory_sync
    from clusters.queues import TeamQueue, queues_sync

    other = register(other_sim, name="other")
    assert inventory_sync(cluster=other).ok
    queues_sync(cluster=other, desired=[TeamQueue("vision", 100, {"nvidia.com/gpu": 64})])
    # Four slots, half of them at most for one cluster (the default).
    private_worker.start(concurrency=4, extra_env={"GPUPOOL_CLUSTER_TASK_SLOTS": "0"})
    sim.faults.add(verb="create", resource="jobs", hang=TIMEOUT_SECONDS * 3, count=-1)
    stuck = [admit(cluster, name=f"stuck-{i}") for i in range(6)]
    for job in stuck:
        dispatch(job)  # one task each (dispatch_job)
    assert wait_for(lambda: sim.faults.count(verb="create", resource="jobs") >= 2, timeout=10)

    job = admit(other, name="elsewhere")
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    submitted = JobEvent.objects.get(job_id=job.pk, reason="Submitted").created_at
    # A's first creates had not even timed out yet when B's job went through.
    first_timeout = (
        JobEvent.objects.filter(job_id__in=[j.pk for j in stuck], reason="DispatchRetry")
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    assert first_timeout is None or submitted < first_timeout
    # And no more than two of A's creates were in flight at once from this worker.
    assert sim.faults.count(verb="create", resource="jobs") <= 2
