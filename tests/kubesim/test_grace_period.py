"""kubesim honours a pod's grace period, which the portal relies on for preemption: a deleted
pod is sent SIGTERM (the kubelet's ``Killing`` event) and stays Terminating until its process
exits (``podTerminationSeconds``, what the simulated process needs to checkpoint and stop) or
its ``terminationGracePeriodSeconds`` runs out (SIGKILL), whichever comes first."""

from __future__ import annotations

import copy

import pytest
from kubernetes.client.exceptions import ApiException

from tests.kubesim.builders import GROUP, VERSION, create_job, get_job, vcjob
from tests.kubesim.conftest import TINY

SLOW_TO_STOP = copy.deepcopy(TINY)
SLOW_TO_STOP["simulation"]["podTerminationSeconds"] = 20


@pytest.fixture
def sim_config():
    return SLOW_TO_STOP


def _job_with_grace(name: str, grace: int) -> dict:
    manifest = vcjob(name, duration=1000)
    manifest["spec"]["tasks"][0]["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    return manifest


def _stop(sim, custom, name: str) -> None:
    create_job(custom, _job_with_grace(name, GRACE[name]))
    sim.settle()
    sim.advance(3)
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, "team-a", "jobs", name, propagation_policy="Foreground"
    )
    sim.settle()


GRACE = {"short-grace": 5, "long-grace": 120}


def _gone(custom, name: str) -> bool:
    try:
        get_job(custom, name)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_a_pod_that_does_not_stop_within_its_grace_is_killed_at_the_grace(sim, custom):
    _stop(sim, custom, "short-grace")
    (pod,) = sim.job_pods("team-a", "short-grace")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 5
    killing = [e for e in sim.list("events", "team-a") if e.get("reason") == "Killing"]
    assert killing, "SIGTERM first: the kubelet says it is stopping the container"
    sim.advance(4)
    assert not _gone(custom, "short-grace")  # still Terminating within its grace
    sim.advance(2)
    assert _gone(custom, "short-grace")


def test_a_pod_with_a_long_grace_stops_when_its_process_exits(sim, custom):
    _stop(sim, custom, "long-grace")
    (pod,) = sim.job_pods("team-a", "long-grace")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 120
    sim.advance(19)
    assert not _gone(custom, "long-grace")
    sim.advance(2)
    assert _gone(custom, "long-grace")
