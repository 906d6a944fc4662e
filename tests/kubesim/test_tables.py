"""What ``kubectl get`` prints: server-side tables, and ages measured on the wall clock."""

from __future__ import annotations

import time

from tests.kubesim.builders import create_job, vcjob


def test_metadata_times_follow_the_wall_clock_while_status_follows_the_simulated_one(
    sim, core, custom
):
    sim.advance(3600)  # the simulated clock is now an hour ahead of the wall clock
    create_job(custom, vcjob("late", namespace="team-b", queue="team-b"))
    sim.settle()
    sim.advance(5)
    pod = core.list_namespaced_pod("team-b").items[0]
    created = pod.metadata.creation_timestamp.timestamp()
    assert abs(time.time() - created) < 5  # AGE is never "<invalid>"
    assert pod.status.start_time.timestamp() > time.time() + 3000  # runtime is simulated
    event = core.list_namespaced_event("team-b").items[0]
    assert abs(time.time() - event.last_timestamp.timestamp()) < 5
