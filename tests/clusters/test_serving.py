"""Inference jobs people can call, end to end on kubesim through the real client: the Service
(and Ingress) made with the Volcano Job, the pods' readiness followed, the endpoint on the job
page and in the REST view, and the objects deleted when the job is cancelled or finishes."""

from __future__ import annotations

import pytest
from django.db.models import F

from clusters.tasks import cluster_reconcile_and_enqueue
from portal.jobs.services import job_cancel
from portal.models import Job, JobEvent, JobState
from rules import volcano
from tests.clusters.conftest import dispatch, wait_deleted, wait_for, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]

NS = "gpupool"


def _service_name(job: Job) -> str:
    return volcano.serving_service_name(str(job.public_id))


def _endpoint(api_as, user, job: Job) -> dict:
    answer = api_as(user).get(f"/api/v1/jobs/{job.public_id}/")
    assert answer.status_code == 200, answer.json()
    return answer.json()["endpoint"]


def _inference(admit, cluster, **fields):
    fields.setdefault("command", ["sh", "-c", "sleep 600"])
    return admit(
        cluster, kind="inference", port=8000, readiness_path="/health", gpus_per_replica=1, **fields
    )


def test_an_inference_job_is_served_once_ready_and_its_service_goes_with_a_cancel(
    sim, cluster, admit, watchers, api_as, client, bob
):
    watchers.start(cluster)
    job = _inference(admit, cluster, replicas=2, nodes=["a100-0", "a100-1"])
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)

    # The Service exists on the cluster, on the port, selecting the job's pods, owned by it.
    service = wait_for(lambda: sim.get("services", _service_name(job), NS))
    assert service, "no Service was created"
    vcjob = sim.get("jobs", volcano.volcano_job_name(str(job.public_id)), NS)
    assert service["spec"]["ports"][0]["port"] == 8000
    assert service["spec"]["clusterIP"].startswith("10.96.")
    assert service["metadata"]["ownerReferences"][0]["uid"] == vcjob["metadata"]["uid"]
    url = f"http://{_service_name(job)}.{NS}.svc.cluster.local:8000"
    assert wait_for(lambda: Job.objects.get(pk=job.pk).endpoint_url == url)

    # Running but not ready: podStartupSeconds (2) passed, readinessSeconds (1) not yet.
    sim.advance(2.2)
    wait_state(job, JobState.RUNNING)
    pod = sim.job_pods(NS, vcjob["metadata"]["name"])[0]
    assert pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/health"
    endpoint = _endpoint(api_as, bob, job)
    assert endpoint["url"] == url and endpoint["ready"] is False
    client.force_login(bob)
    page = client.get(f"/jobs/{job.public_id}/").content.decode()
    assert "Starting: waiting for readiness on port 8000" in page

    # Every replica passes its probe: serving, on the page and in the API.
    sim.advance(1.5)
    assert wait_for(lambda: Job.objects.get(pk=job.pk).endpoint_ready), "never became ready"
    endpoint = _endpoint(api_as, bob, job)
    assert endpoint == {
        "url": url,
        "kind": "clusterip",
        "port": 8000,
        "ready": True,
        "readiness_path": "/health",
        "curl": f"curl -sS {url}/health",
    }
    page = client.get(f"/jobs/{job.public_id}/").content.decode()
    assert '<h2 id="serving-h">Serving</h2>' in page
    assert f"curl -sS {url}/health" in page
    assert JobEvent.objects.filter(job_id=job.pk, reason="Serving").exists()

    # A cancel deletes the Volcano Job and the Service, and the endpoint is gone.
    job_cancel(job=Job.objects.get(pk=job.pk), by=bob)
    wait_deleted(sim, job, JobState.CANCELLED, namespace=NS)
    assert _endpoint(api_as, bob, job)["url"] is None
    # Deleted by the cancel task, also when the watch ended the job first (then the task, or
    # on a real cluster the garbage collector, removes it a moment later).
    assert wait_for(lambda: sim.get("services", _service_name(job), NS) is None)
    assert wait_for(lambda: Job.objects.get(pk=job.pk).endpoint_url == "")
    assert "serving-h" not in client.get(f"/jobs/{job.public_id}/").content.decode()


@pytest.fixture
def ingress_cluster(cluster):
    cluster.serving_exposure = "ingress"
    cluster.ingress_host_pattern = "{job}.{team}.serve.example.org"
    cluster.ingress_class_name = "nginx"
    cluster.save()
    return cluster


def test_on_an_ingress_cluster_the_job_gets_its_host_and_a_finished_job_loses_both(
    sim, ingress_cluster, admit, watchers, api_as, bob
):
    watchers.start(ingress_cluster)
    job = _inference(admit, ingress_cluster, command=["sh", "-c", "sleep 10"])
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    name = _service_name(job)
    ingress = wait_for(lambda: sim.get("ingresses", name, NS))
    assert ingress, "no Ingress was created"
    host = f"{volcano.volcano_job_name(str(job.public_id))}.vision.serve.example.org"
    assert ingress["spec"]["rules"][0]["host"] == host
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == name
    assert sim.get("services", name, NS) is not None
    sim.advance(3.5)
    wait_state(job, JobState.RUNNING)
    assert wait_for(lambda: _endpoint(api_as, bob, job)["ready"])
    endpoint = _endpoint(api_as, bob, job)
    assert (endpoint["url"], endpoint["kind"]) == (f"https://{host}", "ingress")

    # The endpoint event is on the timeline in the state the job was in when it was made,
    # not the ADMITTED the dispatcher had loaded.
    endpoint_event = JobEvent.objects.get(job_id=job.pk, reason="Endpoint")
    state_then = (
        JobEvent.objects.filter(job_id=job.pk, id__lt=endpoint_event.pk)
        .exclude(from_state=F("to_state"))
        .order_by("-id")
        .values_list("to_state", flat=True)
        .first()
    )
    assert (endpoint_event.from_state, endpoint_event.to_state) == (state_then, state_then)
    assert state_then in (JobState.SUBMITTED, JobState.RUNNING)

    # The server exits 0: the job succeeds, and its endpoint goes with the watch's news, not
    # at the next reconcile (an ended Volcano Job stays for its logs, so the owner reference
    # alone would keep the Service and the Ingress).
    sim.advance(10)
    wait_state(job, JobState.SUCCEEDED)
    assert wait_for(lambda: sim.get("services", name, NS) is None, timeout=5)
    assert wait_for(lambda: sim.get("ingresses", name, NS) is None, timeout=5)
    # The row and the timeline follow the deletes (the same task, a moment later).
    removed = wait_for(
        lambda: JobEvent.objects.filter(job_id=job.pk, reason="EndpointRemoved").first(),
        timeout=5,
    )
    assert removed, "the timeline never said the endpoint was removed"
    assert (removed.from_state, removed.to_state) == (JobState.SUCCEEDED, JobState.SUCCEEDED)
    assert _endpoint(api_as, bob, job) == {
        "url": None,
        "kind": None,
        "port": 8000,
        "ready": False,
        "readiness_path": "/health",
        "curl": "",
    }


def test_a_service_the_api_server_refuses_once_is_made_by_the_reconcile(
    sim, cluster, admit, watchers
):
    sim.faults.add(verb="create", resource="services", status=503, count=1)
    job = _inference(admit, cluster)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)  # the job goes on: only its endpoint is late
    assert wait_for(
        lambda: JobEvent.objects.filter(job_id=job.pk, reason="EndpointFailed").exists()
    )
    assert sim.get("services", _service_name(job), NS) is None
    cluster_reconcile_and_enqueue(cluster=cluster)
    assert sim.get("services", _service_name(job), NS) is not None
    assert Job.objects.get(pk=job.pk).endpoint_url.endswith(":8000")


def test_an_inference_job_stopped_at_its_max_runtime_loses_its_service_as_the_watch_sees_it(
    sim, cluster, admit, watchers
):
    """Whichever way the job ends: here the kubelet stops its server at the max runtime
    (activeDeadlineSeconds) and the job FAILS."""
    watchers.start(cluster)
    job = _inference(admit, cluster, max_runtime_seconds=60)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    assert wait_for(lambda: sim.get("services", _service_name(job), NS))
    sim.advance(3)
    wait_state(job, JobState.RUNNING)
    sim.advance(65)
    wait_state(job, JobState.FAILED)
    assert wait_for(lambda: sim.get("services", _service_name(job), NS) is None, timeout=5)
    assert wait_for(lambda: Job.objects.get(pk=job.pk).endpoint_url == "", timeout=5)
