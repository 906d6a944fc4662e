"""Team queues on a cluster: computed from plain values, applied idempotently, drift corrected."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from clusters.inventory import inventory_sync
from clusters.queues import (
    TeamQueue,
    queues_desired,
    queues_desired_for_cluster,
    queues_sync,
    volcano_weight,
)

pytestmark = pytest.mark.django_db

GPUS = {
    "a100-80gb": ("nvidia.com/gpu", 20),
    "t4": ("nvidia.com/gpu", 2),
    "a100-80gb-mig-1g.10gb": ("nvidia.com/mig-1g.10gb", 14),
}


LENDER = ("lender", "a100-80gb", 16, 0)  # idle nominal the cohort may lend


@pytest.mark.parametrize(
    ("quotas", "expected"),
    [
        ([("vision", "a100-80gb", 8, 4), LENDER], {"vision": {"nvidia.com/gpu": 12}}),
        ([("vision", "a100-80gb", 8, None), LENDER], {"vision": {"nvidia.com/gpu": 20}}),
        ([("vision", "a100-80gb", 8, None)], {"vision": {"nvidia.com/gpu": 8}}),
        ([("vision", "a100-80gb", 16, 16), LENDER], {"vision": {"nvidia.com/gpu": 20}}),
        (
            [("vision", "a100-80gb", 4, 0), ("vision", "t4", 1, 0)],
            {"vision": {"nvidia.com/gpu": 5}},
        ),
        (
            # Each may borrow the other's idle quota of a model it has no row for.
            [("vision", "a100-80gb-mig-1g.10gb", 7, 0), ("nlp", "t4", 1, 0)],
            {
                "nlp": {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 7},
                "vision": {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 7},
            },
        ),
        ([("vision", "h100-sxm", 8, 8)], {}),
        ([("vision", "a100-80gb", 0, 0), LENDER], {}),
        ([("vision", "a100-80gb", 0, None)], {}),
    ],
    ids=[
        "nominal plus borrowing",
        "unlimited borrowing is what the cohort can lend, capped by the cluster",
        "nothing to borrow: nominal alone",
        "capped by the cluster",
        "models sharing a resource add up",
        "a MIG slice is its own resource",
        "a model the cluster lacks gives no queue",
        "zero quota and zero borrowing gives no queue",
        "zero quota and nobody to borrow from gives no queue",
    ],
)
def test_desired_queues_from_plain_values(quotas, expected):
    cohorts = {line[0]: "research" for line in quotas}
    desired = queues_desired(
        weights={"vision": 2.0}, quotas=quotas, cluster_gpus=GPUS, cohorts=cohorts
    )
    got = {q.team_slug: dict(q.capability) for q in desired}
    got.pop("lender", None)
    assert got == expected
    for q in desired:
        assert q.weight == (200 if q.team_slug == "vision" else 100)


@pytest.mark.parametrize(
    ("cohorts", "quotas", "owned", "expected"),
    [
        (
            {"vision": "research", "robotics": "research"},
            [("vision", "a100-80gb", 8, 0)],
            [],
            {"vision": {"nvidia.com/gpu": 8}, "robotics": {"nvidia.com/gpu": 8}},
        ),
        (
            {"vision": "research", "robotics": "other"},
            [("vision", "a100-80gb", 8, 0)],
            [],
            {"vision": {"nvidia.com/gpu": 8}},
        ),
        (
            {"vision": "research", "robotics": "research"},
            [("vision", "a100-80gb", 8, 0, 3)],
            [],
            {"vision": {"nvidia.com/gpu": 8}, "robotics": {"nvidia.com/gpu": 3}},
        ),
        (
            {"vision": "research", "robotics": "research", "loner": "other"},
            [],
            [("research", "a100-80gb", 6), ("research", "t4", 5)],
            {"vision": {"nvidia.com/gpu": 8}, "robotics": {"nvidia.com/gpu": 8}},
        ),
    ],
    ids=[
        "a team without a quota row borrows its cohort's idle nominal",
        "a team of another cohort has nothing to borrow and no queue",
        "a lending limit caps what the borrower may be given",
        "a cohort's own quota gives every member a queue, capped by the cluster",
    ],
)
def test_every_team_the_engine_may_admit_has_a_queue(cohorts, quotas, owned, expected):
    desired = queues_desired(
        weights={}, quotas=quotas, cluster_gpus=GPUS, cohorts=cohorts, cohort_quotas=owned
    )
    assert {q.team_slug: dict(q.capability) for q in desired} == expected


def test_weights_keep_their_ratios_within_volcanos_range():
    assert volcano_weight(1.0) == 100 and volcano_weight(0.01) == 1
    assert volcano_weight(2.5) == 250 and volcano_weight(10_000) == 65535


def _queue(sim, name):
    return sim.get("queues", name)


def _caps(queue):
    """Capability with quantities as text (a custom resource keeps what was sent: 12 or "12")."""
    return {k: str(v) for k, v in (queue["spec"].get("capability") or {}).items()}


def test_a_sync_creates_queues_and_a_second_sync_writes_nothing(sim, register):
    cluster = register(sim)
    desired = [
        TeamQueue("vision", 200, {"nvidia.com/gpu": 12}),
        TeamQueue("language", 100, {"nvidia.com/gpu": 4}),
    ]
    first = queues_sync(cluster=cluster, desired=desired)
    assert sorted(first.applied) == ["gp-language", "gp-vision"]
    queue = _queue(sim, "gp-vision")
    assert queue["spec"]["weight"] == 200
    assert _caps(queue) == {"nvidia.com/gpu": "12"}
    assert queue["metadata"]["labels"]["gpupool.dev/team"] == "vision"
    assert any(m["manager"] == "gpupool-portal" for m in queue["metadata"]["managedFields"])
    version = queue["metadata"]["resourceVersion"]
    second = queues_sync(cluster=cluster, desired=desired)
    assert second.applied == [] and sorted(second.unchanged) == ["gp-language", "gp-vision"]
    assert _queue(sim, "gp-vision")["metadata"]["resourceVersion"] == version


def test_drift_made_by_hand_is_corrected(sim, register):
    cluster = register(sim)
    desired = [TeamQueue("vision", 200, {"nvidia.com/gpu": 12})]
    queues_sync(cluster=cluster, desired=desired)
    # Someone edits the queue with their own client (kubectl edit, in effect).
    api = k8s_config.new_client_from_config_dict(sim.kubeconfig_dict())
    k8s.CustomObjectsApi(api).patch_cluster_custom_object(
        "scheduling.volcano.sh",
        "v1beta1",
        "queues",
        "gp-vision",
        {"spec": {"weight": 1, "capability": {"nvidia.com/gpu": "64"}}},
    )
    api.close()
    assert _queue(sim, "gp-vision")["spec"]["weight"] == 1
    result = queues_sync(cluster=cluster, desired=desired)
    assert result.applied == ["gp-vision"]
    spec = _queue(sim, "gp-vision")["spec"]
    assert spec["weight"] == 200 and _caps({"spec": spec}) == {"nvidia.com/gpu": "12"}


VISION = TeamQueue("vision", 200, {"nvidia.com/gpu": 12})
LANGUAGE = TeamQueue("language", 100, {"nvidia.com/gpu": 4})


def _state(sim, name):
    return (_queue(sim, name).get("status") or {}).get("state")


def _run_in_queue(sim, queue, name="train", seconds=60):
    """A one-pod Volcano Job in ``queue`` that runs ``seconds`` and is collected 30 s later."""
    container = {
        "name": "trainer",
        "image": "example/trainer:1.0",
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    sim.create(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": "gpupool",
                "annotations": {"kubesim.gpupool.dev/duration-seconds": str(seconds)},
            },
            "spec": {
                "queue": queue,
                "minAvailable": 1,
                "ttlSecondsAfterFinished": 30,
                "tasks": [
                    {
                        "name": "worker",
                        "replicas": 1,
                        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
                    }
                ],
            },
        }
    )


def test_a_team_that_loses_its_quota_gets_its_queue_closed_once_its_jobs_are_gone(sim, register):
    cluster = register(sim)
    queues_sync(cluster=cluster, desired=[VISION, LANGUAGE])
    _run_in_queue(sim, "gp-language")
    sim.advance(5)
    assert sim.job_phase("gpupool", "train") == "Running"

    result = queues_sync(cluster=cluster, desired=[VISION])
    assert result.closed == ["gp-language"] and result.problems == []
    assert _caps(_queue(sim, "gp-language")) == {"nvidia.com/gpu": "0"}
    sim.settle()
    # Volcano's queue controller consumed the Command; a PodGroup is left, so Closing.
    assert _state(sim, "gp-language") == "Closing"
    assert sim.list("commands", "gpupool-system") == []
    assert [e["message"] for e in sim.events(involved="gp-language")] == ["Close queue succeed"]
    assert sim.job_phase("gpupool", "train") == "Running"  # closing stops nothing that runs

    sim.advance(60)  # the job finishes; its PodGroup stays until the job is collected
    assert sim.job_phase("gpupool", "train") == "Completed"
    assert _state(sim, "gp-language") == "Closing"
    sim.advance(30)  # ttlSecondsAfterFinished deletes the job and its PodGroup
    assert sim.get("jobs", "train", "gpupool") is None
    assert _state(sim, "gp-language") == "Closed"

    again = queues_sync(cluster=cluster, desired=[VISION])
    assert again.closed == ["gp-language"] and again.problems == []
    sim.settle()
    assert sim.list("commands", "gpupool-system") == []
    cluster.refresh_from_db()
    assert cluster.queues_error == ""


def test_a_closed_queue_refuses_new_jobs(sim, register):
    from kubesim import ApiError

    cluster = register(sim)
    queues_sync(cluster=cluster, desired=[VISION, LANGUAGE])
    queues_sync(cluster=cluster, desired=[VISION])
    sim.settle()
    assert _state(sim, "gp-language") == "Closed"  # nothing ran there: no PodGroup to wait for
    with pytest.raises(ApiError) as excinfo:
        _run_in_queue(sim, "gp-language")
    assert excinfo.value.code == 400
    assert (
        "can only submit job to queue with state `Open`, queue `gp-language` status is `Closed`"
        in excinfo.value.message
    )


def test_syncs_before_volcano_acts_issue_one_command(sim, register):
    cluster = register(sim)
    queues_sync(cluster=cluster, desired=[VISION, LANGUAGE])
    sim.pause()  # Volcano's controllers fall behind
    for _ in range(3):
        result = queues_sync(cluster=cluster, desired=[VISION])
        assert result.closed == ["gp-language"] and result.problems == []
    commands = sim.list("commands", "gpupool-system")
    assert len(commands) == 1
    command = commands[0]
    assert command["action"] == "CloseQueue"
    assert command["target"] == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "name": "gp-language",
        "uid": _queue(sim, "gp-language")["metadata"]["uid"],
    }
    sim.resume()
    sim.settle()
    assert _state(sim, "gp-language") == "Closed"
    assert sim.list("commands", "gpupool-system") == []


def test_a_team_that_regains_its_quota_gets_its_queue_reopened(sim, register):
    cluster = register(sim)
    queues_sync(cluster=cluster, desired=[VISION, LANGUAGE])
    queues_sync(cluster=cluster, desired=[VISION])
    sim.settle()
    assert _state(sim, "gp-language") == "Closed"

    result = queues_sync(cluster=cluster, desired=[VISION, LANGUAGE])
    assert result.opened == ["gp-language"] and result.problems == []
    sim.settle()
    assert _state(sim, "gp-language") == "Open"
    assert _caps(_queue(sim, "gp-language")) == {"nvidia.com/gpu": "4"}
    assert sim.list("commands", "gpupool-system") == []
    again = queues_sync(cluster=cluster, desired=[VISION, LANGUAGE])
    assert again.opened == [] and again.applied == [] and again.problems == []
    _run_in_queue(sim, "gp-language")  # accepted again
    sim.advance(5)
    assert sim.job_phase("gpupool", "train") == "Running"
    cluster.refresh_from_db()
    assert cluster.queues_error == ""


def test_a_cluster_without_volcano_commands_is_reported(sim, register):
    cluster = register(sim)
    queues_sync(cluster=cluster, desired=[VISION, LANGUAGE])
    sim.faults.add(verb="create", resource="commands", status=404, count=-1)
    result = queues_sync(cluster=cluster, desired=[VISION])
    assert result.closed == ["gp-language"]
    assert _caps(_queue(sim, "gp-language")) == {"nvidia.com/gpu": "0"}  # holds regardless
    assert any("does not serve Volcano Commands" in p for p in result.problems)
    cluster.refresh_from_db()
    assert "gp-language" in cluster.queues_error


def test_queues_not_made_by_the_portal_are_left_alone(sim, register):
    cluster = register(sim)
    sim.add_queue("research", weight=5)
    queues_sync(cluster=cluster, desired=[])
    assert _queue(sim, "research")["spec"]["weight"] == 5


def test_desired_queues_come_from_quotas_and_weights(sim, register, vision, language):
    from scheduling.models import Cohort, CohortQuota, GpuModel, Quota, TeamPolicy
    from tests.factories import TeamFactory

    cluster = register(sim)
    inventory_sync(cluster=cluster)
    a100, v100 = GpuModel.objects.get(key="a100-80gb"), GpuModel.objects.get(key="v100-32gb")
    TeamPolicy.objects.create(team=vision, weight=3.0)
    Quota.objects.create(team=vision, gpu_model=a100, nominal=8, borrowing_limit=4)
    Quota.objects.create(team=language, gpu_model=v100, nominal=2)
    # Robotics has no quota row and its own cohort, which owns 4 V100s: it may borrow them.
    robotics = TeamFactory(name="Robotics", slug="robotics")
    lab = Cohort.objects.create(name="Lab", slug="lab")
    TeamPolicy.objects.create(team=robotics, cohort=lab)
    CohortQuota.objects.create(cohort=lab, gpu_model=v100, nominal=4)
    desired = {q.team_slug: q for q in queues_desired_for_cluster(cluster)}
    assert desired["vision"].weight == 300
    # Vision: 8 A100 nominal (nobody lends it A100) + the 2 V100 language may lend it.
    assert dict(desired["vision"].capability) == {"nvidia.com/gpu": 10}
    # Language: its 2 V100 + vision's 8 idle A100 (unlimited borrowing).
    assert dict(desired["language"].capability) == {"nvidia.com/gpu": 10}
    assert dict(desired["robotics"].capability) == {"nvidia.com/gpu": 4}
    result = queues_sync(cluster=cluster)
    assert sorted(result.applied) == ["gp-language", "gp-robotics", "gp-vision"]


@pytest.mark.django_db(transaction=True)
def test_a_quota_change_reaches_the_teams_volcano_queue(
    sim, cluster, celery_worker, api_as, root, language
):
    """Staff change a quota through the API; within seconds, not at the periodic sync, the
    team's queue on the cluster caps the team at nominal plus borrowing limit (language's idle
    nominal is there to borrow)."""
    import time

    from django.core.cache import cache

    from clusters.tasks import QUEUE_SYNC_PENDING_KEY
    from scheduling.models import GpuModel, Quota

    a100 = GpuModel.objects.get(key="a100-80gb")
    Quota.objects.bulk_create([Quota(team=language, gpu_model=a100, nominal=8)])  # no signal

    cache.delete(QUEUE_SYNC_PENDING_KEY)  # a request left over from another test coalesces
    assert _caps(_queue(sim, "gp-vision")) == {"nvidia.com/gpu": "64"}  # the fixture's queue

    def capability_becomes(expected):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if _caps(_queue(sim, "gp-vision")) == expected:
                return True
            time.sleep(0.05)
        return False

    body = {"team": "vision", "gpu_model": "a100-80gb", "nominal": 8, "borrowing_limit": 4}
    assert api_as(root).post("/api/v1/quotas/", body, format="json").status_code == 200
    assert capability_becomes({"nvidia.com/gpu": "12"}), celery_worker.output()[-3000:]

    lowered = {**body, "nominal": 2, "borrowing_limit": 0}
    assert api_as(root).post("/api/v1/quotas/", lowered, format="json").status_code == 200
    assert capability_becomes({"nvidia.com/gpu": "2"}), celery_worker.output()[-3000:]
    assert _queue(sim, "gp-vision")["spec"]["weight"] == 100
