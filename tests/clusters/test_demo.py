"""The ``make demo`` path: seed, kubesim from the demo's own command line, the demo cluster
registered by ``demo_cluster_register``, then one job from a demo user's REST call to
SUCCEEDED.

The kubesim here runs in this process from the config ``run_demo`` starts it with, with its
clock frozen (the demo's runs 5x fast) so the test moves time with ``sim.advance`` instead of
waiting for it; it writes its kubeconfig the way ``python -m kubesim --kubeconfig`` does.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from clusters.demo import DEMO_CLUSTER, DEMO_NAMESPACE, DEMO_QUOTAS, demo_cluster_register
from clusters.models import Cluster, Node
from kubesim import KubeSim
from portal.demo import DEMO_PASSWORD
from portal.management.commands.run_demo import demo_processes
from portal.models import Job, JobEvent, JobState
from rules import volcano
from scheduling.cycle import run_cycle
from scheduling.models import Quota
from tests.clusters.conftest import wait_for, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


def _demo_kubesim_args() -> list[str]:
    """The kubesim command line ``make demo`` runs (building it removes a stale kubeconfig
    under ``VAR_DIR``: the caller points that somewhere of its own)."""
    commands = dict(demo_processes("127.0.0.1", 8000))
    assert commands["kubesim"][1:3] == ["-m", "kubesim"]
    return commands["kubesim"]


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.fixture
def demo_sim(settings: Any, tmp_path: Path) -> Iterator[KubeSim]:
    settings.VAR_DIR = tmp_path  # never touch a running demo's files
    config = Path(_option(_demo_kubesim_args(), "--config"))
    assert config.is_file(), config
    with KubeSim(config, clock_speed=0) as server:
        yield server


@pytest.fixture
def demo_cluster(demo_sim: KubeSim, tmp_path: Path) -> Cluster:
    call_command("seed_demo", stdout=io.StringIO())  # what ``make demo`` runs before run_demo
    kubeconfig = demo_sim.write_kubeconfig(tmp_path / "demo" / "kubesim.kubeconfig")
    cluster = demo_cluster_register(kubeconfig)
    assert cluster is not None, "the demo cluster was not registered"
    return cluster


def test_the_demo_kubesim_is_registered_with_its_inventory_quotas_and_queues(
    demo_sim, demo_cluster, tmp_path
):
    assert demo_cluster.name == DEMO_CLUSTER
    assert demo_cluster.api_url == demo_sim.url
    models = set(
        Node.objects.filter(cluster=demo_cluster, gpu_model__isnull=False).values_list(
            "gpu_model__key", flat=True
        )
    )
    assert {"a100-80gb", "v100-32gb", "t4"} <= models, models
    whole = {
        key: sum(
            Node.objects.filter(
                cluster=demo_cluster, gpu_model__key=key, gpu_resource="nvidia.com/gpu"
            ).values_list("gpu_allocatable", flat=True)
        )
        for key in ("a100-80gb", "v100-32gb", "t4")
    }
    # small.yaml: 2 x 8 A100 plus 4 whole ones on the MIG node, 2 x 4 V100, 3 x 1 T4.
    assert whole == {"a100-80gb": 20, "v100-32gb": 8, "t4": 3}
    quotas = set(
        Quota.objects.values_list("team__slug", "gpu_model__key", "nominal", "borrowing_limit")
    )
    assert quotas == set(DEMO_QUOTAS)
    queues = {q["metadata"]["name"] for q in demo_sim.list("queues")}
    assert {volcano.volcano_queue_name(t) for t in ("vision", "language", "robotics")} <= queues

    # The next ``make demo`` (a fresh token) re-keys the same row and keeps an admin's edits.
    Quota.objects.filter(team__slug="vision", gpu_model__key="a100-80gb").update(nominal=2)
    token = demo_sim.add_token(role="cluster-admin")
    again = demo_cluster_register(demo_sim.write_kubeconfig(tmp_path / "again", token=token))
    assert again is not None and again.pk == demo_cluster.pk
    assert Cluster.objects.count() == 1
    assert Quota.objects.get(team__slug="vision", gpu_model__key="a100-80gb").nominal == 2


def test_a_demo_users_job_runs_from_the_rest_api_to_succeeded(demo_sim, demo_cluster, watchers):
    watchers.start(demo_cluster)
    client = APIClient()
    logged_in = client.post(  # through the login form, as the demo's users do
        "/login/", {"username": "alice", "password": DEMO_PASSWORD}, format="multipart"
    )
    assert logged_in.status_code == 302
    response = client.post(
        "/api/v1/jobs/",
        {
            "team": "vision",
            "name": "demo-resnet",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": ["python", "train.py"],
            "replicas": 1,
            "gpus_per_replica": 2,
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["state"] == JobState.QUEUED
    job = Job.objects.get(public_id=response.json()["id"])

    result = run_cycle()  # the scheduler (beat runs it every few seconds in the demo)
    assert result.ran and job.pk in result.admitted
    wait_state(job, JobState.SUBMITTED)
    job.refresh_from_db()
    assert job.cluster_id == demo_cluster.pk
    name = volcano.volcano_job_name(str(job.public_id))
    assert demo_sim.get("jobs", name, DEMO_NAMESPACE) is not None

    demo_sim.advance(3)  # podStartupSeconds: 2
    wait_state(job, JobState.RUNNING)
    pods = demo_sim.job_pods(DEMO_NAMESPACE, name)
    assert len(pods) == 1
    node = pods[0]["spec"]["nodeName"]
    assert Node.objects.get(cluster=demo_cluster, name=node, gpu_resource="nvidia.com/gpu")
    assert wait_for(lambda: Job.objects.get(pk=job.pk).node_plan == [node])

    demo_sim.advance(301)  # defaultDurationSeconds: 300
    wait_state(job, JobState.SUCCEEDED)
    events = JobEvent.objects.filter(job_id=job.pk).order_by("created_at", "id")
    states = [e.to_state for e in events if e.from_state != e.to_state]
    assert states == [
        JobState.QUEUED,
        JobState.ADMITTED,
        JobState.SUBMITTED,
        JobState.RUNNING,
        JobState.SUCCEEDED,
    ]
    detail = client.get(f"/api/v1/jobs/{job.public_id}/").json()
    assert detail["state"] == JobState.SUCCEEDED
