"""From ADMITTED to a Volcano Job on kubesim, through a real Celery worker process.

Each test admits a job by hand (what the scheduling cycle does), hands it over through the
cycle's ``portal.hooks.admitted`` hook, and watches the job row and the simulated cluster.
"""

from __future__ import annotations

import copy
import datetime as dt
import time

import pytest
from django.utils import timezone
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from clusters.clients import cluster_unreachable_mark
from clusters.dispatch import job_dispatch, job_dispatch_batch
from clusters.dispatch.outcomes import _cluster_answered
from clusters.manifests import job_manifest, submission_uid
from clusters.models import VolcanoJobRecord
from clusters.tasks import _dispatch_later
from portal.models import Job, JobEvent, JobState, WorkerBeat
from rules import volcano
from tests.clusters.conftest import MAX_ATTEMPTS, SMALL, dispatch, wait_for, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


def _events(job, reason=None):
    events = JobEvent.objects.filter(job_id=job.pk).order_by("created_at", "id")
    return [e for e in events if reason is None or e.reason == reason]


def _vcjob(sim, job):
    return sim.get("jobs", volcano.volcano_job_name(str(job.public_id)), "gpupool")


def _precreate(sim, manifest):
    """Create a Volcano Job as some other client would (the official client, over HTTPS)."""
    api = k8s_config.new_client_from_config_dict(sim.kubeconfig_dict())
    try:
        return k8s.CustomObjectsApi(api).create_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", "gpupool", "jobs", manifest
        )
    finally:
        api.close()


def test_an_admitted_job_becomes_a_volcano_job(sim, cluster, admit):
    job = admit(cluster, replicas=2, gpus_per_replica=4, nodes=["a100-0", "a100-1"])
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    job.refresh_from_db()
    obj = _vcjob(sim, job)
    assert obj is not None
    assert job.volcano_job_name == obj["metadata"]["name"] == f"gp-{job.public_id.hex}"
    assert job.dispatch_attempts == 1
    meta = obj["metadata"]
    assert meta["labels"]["gpupool.dev/job-id"] == str(job.public_id)
    assert meta["labels"]["gpupool.dev/team"] == "vision"
    assert meta["annotations"]["gpupool.dev/submission-uid"] == submission_uid(job)
    spec = obj["spec"]
    assert spec["queue"] == "gp-vision" and spec["minAvailable"] == 2
    assert [t["name"] for t in spec["tasks"]] == ["master", "worker"]
    pod = spec["tasks"][0]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu-type": "a100-80gb"}
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] in (4, "4")
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    record = VolcanoJobRecord.objects.get(job_id=job.pk)
    assert (record.namespace, record.uid) == ("gpupool", meta["uid"])
    assert [e.reason for e in _events(job)][-1] == "Submitted"


def test_a_mig_job_asks_for_its_slice_resource(sim, cluster, admit):
    job = admit(cluster, model="a100-80gb-mig-1g.10gb", gpus_per_replica=2, nodes=["a100-mig-0"])
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    limits = _vcjob(sim, job)["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert limits["resources"]["limits"]["nvidia.com/mig-1g.10gb"] in (2, "2")


def test_an_existing_object_with_our_submission_uid_is_adopted(sim, cluster, admit):
    job = admit(cluster)
    _, manifest = job_manifest(
        Job.objects.select_related("cluster", "gpu_model", "team").get(pk=job.pk)
    )
    created = _precreate(sim, manifest)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    assert [e.reason for e in _events(job)][-1] == "Adopted"
    after = _vcjob(sim, job)
    assert after["metadata"]["uid"] == created["metadata"]["uid"]
    assert after["spec"] == created["spec"]


def test_an_existing_object_of_someone_else_is_a_conflict_and_never_overwritten(
    sim, cluster, admit
):
    job = admit(cluster)
    _, manifest = job_manifest(
        Job.objects.select_related("cluster", "gpu_model", "team").get(pk=job.pk)
    )
    theirs = copy.deepcopy(manifest)
    theirs["metadata"]["annotations"][volcano.ANNOTATION_SUBMISSION_UID] = "someone-else"
    _precreate(sim, theirs)
    dispatch(job)
    wait_state(job, JobState.FAILED)
    assert _events(job, "VolcanoJobConflict")
    failed = _events(job)[-1]
    assert failed.to_state == JobState.FAILED and "never overwrites" in failed.message
    kept = _vcjob(sim, job)
    assert kept["metadata"]["annotations"][volcano.ANNOTATION_SUBMISSION_UID] == "someone-else"


def test_an_earlier_object_still_being_deleted_is_waited_out_then_replaced(sim, cluster, admit):
    """A requeued job's previous Volcano Job can linger in deletion (a finalizer): the new
    dispatch backs off instead of failing, and creates its own once the old one is gone."""
    job = admit(cluster)
    _, manifest = job_manifest(
        Job.objects.select_related("cluster", "gpu_model", "team").get(pk=job.pk)
    )
    earlier = copy.deepcopy(manifest)
    earlier["metadata"]["annotations"][volcano.ANNOTATION_SUBMISSION_UID] = "earlier-admission"
    earlier["metadata"]["finalizers"] = ["example.com/hold"]
    _precreate(sim, earlier)
    api = k8s_config.new_client_from_config_dict(sim.kubeconfig_dict())
    custom = k8s.CustomObjectsApi(api)
    name = manifest["metadata"]["name"]
    try:
        custom.delete_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", "gpupool", "jobs", name
        )
        dispatch(job)
        assert wait_for(lambda: _events(job, "DispatchRetry"), timeout=10)
        assert "still being deleted" in _events(job, "DispatchRetry")[0].message
        assert Job.objects.get(pk=job.pk).state == JobState.ADMITTED
        custom.patch_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", "gpupool", "jobs", name,
            {"metadata": {"finalizers": None}},
        )  # fmt: skip
    finally:
        api.close()
    wait_state(job, JobState.SUBMITTED, timeout=30)
    annotations = _vcjob(sim, job)["metadata"]["annotations"]
    assert annotations[volcano.ANNOTATION_SUBMISSION_UID] == submission_uid(job)
    assert not _events(job, "VolcanoJobConflict")


def test_server_errors_are_retried_with_backoff_until_the_create_succeeds(sim, cluster, admit):
    sim.faults.add(verb="create", resource="jobs", status=500, count=3)
    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    job.refresh_from_db()
    assert job.dispatch_attempts == 4
    retries = _events(job, "DispatchRetry")
    assert len(retries) == 3 and "500" in retries[0].message
    assert sim.faults.count(verb="create", resource="jobs") == 3


def test_too_many_requests_waits_at_least_retry_after(sim, cluster, admit):
    sim.faults.add(verb="create", resource="jobs", status=429, retry_after=2, count=1)
    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    retry = _events(job, "DispatchRetry")[0]
    submitted = _events(job, "Submitted")[0]
    assert "429" in retry.message
    assert (submitted.created_at - retry.created_at).total_seconds() >= 2.0


def test_no_second_hand_off_beats_retry_after(sim, cluster, admit):
    # A duplicate message (a wake when the cluster answers again, a re-drive) arrives while
    # the job waits out the cluster's Retry-After: it must not send the create early.
    sim.faults.add(verb="create", resource="jobs", status=429, retry_after=3, count=1)
    job = admit(cluster)
    dispatch(job)
    assert wait_for(lambda: _events(job, "DispatchRetry"))
    dispatch(job)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    retry = _events(job, "DispatchRetry")[0]
    submitted = _events(job, "Submitted")[0]
    assert (submitted.created_at - retry.created_at).total_seconds() >= 3.0


def test_a_timeout_is_retried_and_the_late_create_is_adopted_not_doubled(sim, cluster, admit):
    # The first create stalls past the client's timeout, then succeeds on the server anyway.
    sim.faults.add(verb="create", resource="jobs", hang=3, count=1)
    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED, timeout=30)
    retries = _events(job, "DispatchRetry")
    assert retries and "did not answer in time" in retries[0].message
    time.sleep(1.5)  # let the stalled request finish on the server
    assert len(sim.list("jobs", "gpupool")) == 1


def test_a_validation_error_fails_the_job_with_the_api_servers_message(sim, cluster, admit):
    sim.faults.add(
        verb="create",
        resource="jobs",
        status=422,
        message='Job.batch.volcano.sh "x" is invalid: spec.tasks[0].template: Invalid value',
    )
    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.FAILED)
    failed = _events(job)[-1]
    assert failed.reason == "SubmitRejected"
    assert "spec.tasks[0].template: Invalid value" in failed.message
    assert not _events(job, "DispatchRetry")


def test_a_missing_queue_fails_the_job_saying_so(sim, cluster, admit):
    sim.delete_queue("gp-vision")
    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.FAILED)
    failed = _events(job)[-1]
    assert 'unable to find job queue: queue.scheduling.volcano.sh "gp-vision" not found' in (
        failed.message
    )


def test_a_batch_whose_team_queue_went_missing_syncs_it_once_and_goes_through(
    sim, cluster, admit, vision
):
    from scheduling.models import GpuModel, Quota

    # bulk_create sends no signal: no queue sync is requested before the dispatch needs one.
    model = GpuModel.objects.get(key="a100-80gb")
    Quota.objects.bulk_create([Quota(team=vision, gpu_model=model, nominal=8)])
    sim.delete_queue("gp-vision")
    jobs = [admit(cluster, name=f"queue-{i}") for i in range(3)]
    dispatch(*jobs)
    for job in jobs:
        wait_state(job, JobState.SUBMITTED)
    assert sim.get("queues", "gp-vision") is not None
    repairs = [e for j in jobs for e in _events(j, "QueueRepair")]
    assert len(repairs) == 3 and 'queue.scheduling.volcano.sh "gp-vision" not found' in (
        repairs[0].message
    )


def test_a_forbidden_create_fails_at_once(sim, cluster, admit):
    sim.faults.add(verb="create", resource="jobs", status=403, count=1)
    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.FAILED)
    assert "403" in _events(job)[-1].message
    assert Job.objects.filter(pk=job.pk).values_list("dispatch_attempts", flat=True).get() == 1


def test_retries_are_bounded(sim, cluster, admit):
    sim.faults.add(verb="create", resource="jobs", status=503, count=-1)
    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.FAILED, timeout=30)
    job.refresh_from_db()
    assert job.dispatch_attempts == MAX_ATTEMPTS
    assert f"after {MAX_ATTEMPTS} attempts" in _events(job)[-1].message


def test_a_duplicated_message_creates_one_volcano_job(sim, cluster, admit):
    job = admit(cluster)
    dispatch(job)
    dispatch(job)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    time.sleep(0.5)
    assert len(sim.list("jobs", "gpupool")) == 1
    # One move to SUBMITTED: by the message whose create went through ("Submitted"), or by
    # one that met its 409 and won the compare-and-set first ("Adopted").
    moves = [e for e in _events(job) if e.to_state == JobState.SUBMITTED]
    assert [e.reason for e in moves] in (["Submitted"], ["Adopted"])


def _held_by(job, owner, *, beating):
    """The job as an attempt by ``owner`` leaves it mid-create: claimed, its lease running."""
    if beating:
        WorkerBeat.objects.update_or_create(name=owner, defaults={"seen_at": timezone.now()})
    Job.objects.filter(pk=job.pk).update(
        dispatch_owner=owner,
        dispatch_attempts=1,
        dispatch_next_at=timezone.now() + dt.timedelta(seconds=60),
    )


def test_a_hand_off_while_another_attempt_is_in_flight_sends_nothing(sim, cluster, admit):
    job = admit(cluster)
    _held_by(job, "other-host:1:abc", beating=True)
    outcome = job_dispatch(job_id=job.pk)
    assert outcome.done and "in flight" in outcome.message
    assert sim.list("jobs", "gpupool") == []
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.dispatch_attempts == 1


def test_an_attempt_whose_worker_stopped_beating_is_taken_over(sim, cluster, admit):
    job = admit(cluster)
    _held_by(job, "gone-host:1:abc", beating=False)
    assert job_dispatch(job_id=job.pk).message == "submitted"
    job.refresh_from_db()
    assert job.state == JobState.SUBMITTED and job.dispatch_attempts == 2
    assert len(sim.list("jobs", "gpupool")) == 1


def test_an_attempt_whose_lease_ran_out_is_taken_over(sim, cluster, admit):
    job = admit(cluster)
    _held_by(job, "slow-host:1:abc", beating=True)
    Job.objects.filter(pk=job.pk).update(dispatch_next_at=timezone.now())
    assert job_dispatch(job_id=job.pk).message == "submitted"
    assert _events(job, "Submitted")


def test_a_cluster_answering_again_wakes_the_waiting_not_a_create_in_flight(sim, cluster, admit):
    waiting, in_flight, answered = admit(cluster), admit(cluster), admit(cluster)
    Job.objects.filter(pk=waiting.pk).update(
        dispatch_next_at=timezone.now() + dt.timedelta(seconds=60)
    )
    _held_by(in_flight, "other-host:1:abc", beating=True)
    cluster_unreachable_mark(cluster, "connection refused")
    answered = Job.objects.select_related("cluster").get(pk=answered.pk)
    assert _cluster_answered(answered) == [waiting.pk]
    assert job_dispatch(job_id=in_flight.pk).message.endswith("is in flight")
    assert sim.list("jobs", "gpupool") == []


def test_a_hand_off_deferred_for_a_busy_cluster_keeps_the_lease_of_a_create_in_flight(
    sim, cluster, admit
):
    job = admit(cluster)
    _held_by(job, "other-host:1:abc", beating=True)
    _dispatch_later([job.pk], 0.01)
    time.sleep(0.05)
    assert job_dispatch(job_id=job.pk).message.endswith("is in flight")
    assert sim.list("jobs", "gpupool") == []


def test_a_batch_leaves_a_job_whose_create_is_in_flight_to_that_attempt(sim, cluster, admit):
    held, free = admit(cluster, name="held"), admit(cluster, name="free")
    _held_by(held, "other-host:1:abc", beating=True)
    outcome = job_dispatch_batch(job_ids=[held.pk, free.pk])
    assert outcome.later == {}
    [created] = sim.list("jobs", "gpupool")
    assert created["metadata"]["name"] == volcano.volcano_job_name(str(free.public_id))
    held.refresh_from_db()
    assert held.state == JobState.ADMITTED and held.dispatch_owner == "other-host:1:abc"
    assert held.dispatch_attempts == 1


def test_a_job_cancelled_while_its_create_is_in_flight_leaves_nothing_behind(
    sim, cluster, admit, bob
):
    from portal.jobs.services import job_cancel

    sim.faults.add(verb="create", resource="jobs", hang=1.5, count=1)
    job = admit(cluster)
    dispatch(job)
    assert wait_for(lambda: sim.faults.count(verb="create", kind="hang") == 1, timeout=10)
    job_cancel(job=Job.objects.get(pk=job.pk), by=bob)
    wait_state(job, JobState.CANCELLED)
    assert wait_for(lambda: not sim.list("jobs", "gpupool"), timeout=10), sim.list(
        "jobs", "gpupool"
    )


def test_a_batch_of_admissions_is_dispatched_together_and_failures_retried_alone(
    sim, cluster, admit
):
    sim.faults.add(verb="create", resource="jobs", status=500, count=2)
    jobs = [admit(cluster, name=f"batch-{i}") for i in range(6)]
    dispatch(*jobs)  # one dispatch_jobs message for all six
    for job in jobs:
        wait_state(job, JobState.SUBMITTED)
    assert len(sim.list("jobs", "gpupool")) == 6
    retried = [j for j in jobs if _events(j, "DispatchRetry") or Job.objects.get(
        pk=j.pk).dispatch_attempts > 1]  # fmt: skip
    assert len(retried) == 2
    assert all(VolcanoJobRecord.objects.filter(job_id=j.pk).exists() for j in jobs)


def test_a_batch_honours_retry_after_for_the_job_the_cluster_throttled(sim, cluster, admit):
    sim.faults.add(verb="create", resource="jobs", status=429, retry_after=2, count=1)
    jobs = [admit(cluster, name=f"throttled-{i}") for i in range(4)]
    dispatch(*jobs)
    for job in jobs:
        wait_state(job, JobState.SUBMITTED)
    (throttled,) = [j for j in jobs if _events(j, "DispatchRetry")]
    retry = _events(throttled, "DispatchRetry")[0]
    submitted = _events(throttled, "Submitted")[0]
    assert "429" in retry.message
    assert (submitted.created_at - retry.created_at).total_seconds() >= 2.0
    assert sim.faults.count(verb="create", resource="jobs") == 1


def test_an_already_exists_that_cannot_be_read_back_is_retried_a_bounded_number_of_times(
    sim, cluster, admit
):
    # Every create answers AlreadyExists, yet no object by that name can ever be read.
    sim.faults.add(verb="create", resource="jobs", status=409, count=-1)
    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.FAILED, timeout=30)
    job.refresh_from_db()
    assert job.dispatch_attempts == MAX_ATTEMPTS
    assert "went away" in _events(job)[-1].message


def test_a_clusters_own_creates_in_flight_bounds_a_batch(sim, cluster, admit):
    """Six creates that each take a second, two at a time: three rounds, not one."""
    cluster.creates_in_flight = 2
    cluster.save(update_fields=["creates_in_flight"])
    sim.faults.add(verb="create", resource="jobs", hang=1.0, count=-1)
    jobs = [admit(cluster, name=f"slow-{i}") for i in range(6)]
    started = time.monotonic()
    dispatch(*jobs)
    for job in jobs:
        wait_state(job, JobState.SUBMITTED)
    assert time.monotonic() - started >= 3.0
    assert all(not _events(j, "DispatchRetry") for j in jobs)


def test_a_clusters_own_request_rate_paces_its_creates(sim, cluster, admit):
    """At 4 requests a second, 12 creates cannot all land within two seconds."""
    cluster.request_rate = 4
    cluster.save(update_fields=["request_rate"])
    jobs = [admit(cluster, name=f"paced-{i}") for i in range(12)]
    started = time.monotonic()
    dispatch(*jobs)
    for job in jobs:
        wait_state(job, JobState.SUBMITTED)
    assert time.monotonic() - started >= 2.0
    assert len(sim.list("jobs", "gpupool")) == 12


def test_a_dispatch_batch_costs_the_same_statements_for_3_jobs_or_9(sim, cluster, admit):
    """No statement per job: a deferred column read by the batch would add one per job."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    job_dispatch_batch(job_ids=[admit(cluster, name="warm-up").pk])  # client and node caches
    counts = []
    for size in (3, 9):
        ids = [admit(cluster, name=f"q{size}-{i}").pk for i in range(size)]
        with CaptureQueriesContext(connection) as queries:
            assert job_dispatch_batch(job_ids=ids).later == {}
        counts.append(len(queries))
        assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {
            JobState.SUBMITTED
        }
    assert counts[0] == counts[1], counts


class TestGpuNodesTaintedNoExecute:
    """Some clusters taint GPU nodes ``nvidia.com/gpu:NoExecute``: the inventory counts them
    schedulable, so the job's pods must tolerate that effect too, or they pend forever."""

    @pytest.fixture
    def sim_config(self):
        taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}
        pool = {"name": "t4", "count": 1, "gpuModel": "t4", "gpus": 1, "taints": [taint]}
        return {**SMALL, "nodePools": [{**pool, "cpu": 16, "memory": "64Gi"}]}

    def test_the_jobs_pods_run_there(self, sim, cluster, admit):
        job = admit(cluster, model="t4", nodes=["t4-0"], gpus_per_replica=1, replicas=1)
        dispatch(job)
        wait_state(job, JobState.SUBMITTED)
        sim.advance(3)
        pods = sim.job_pods("gpupool", volcano.volcano_job_name(str(job.public_id)))
        assert [p["spec"].get("nodeName") for p in pods] == ["t4-0"]
        assert [p["status"]["phase"] for p in pods] == ["Running"]
