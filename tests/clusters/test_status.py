"""Following Volcano Jobs to the end: watch, relist on 410, reconcile, pod-level reasons."""

from __future__ import annotations

import logging
import uuid

import pytest
from django.utils import timezone
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from clusters.manifests import job_manifest
from clusters.models import ClusterWatch, VolcanoJobRecord
from clusters.observed import JobView
from clusters.status import StatusOutcome, job_status_apply
from clusters.tasks import cluster_reconcile_and_enqueue
from portal.models import Job, JobEvent, JobState
from tests.clusters.conftest import dispatch, vcjob_name, wait_for, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


def _reasons(job):
    return list(JobEvent.objects.filter(job_id=job.pk).values_list("reason", flat=True))


def _event(job, reason):
    return JobEvent.objects.filter(job_id=job.pk, reason=reason).order_by("-id").first()


def _name(job):
    return vcjob_name(job)


def _submitted(sim, cluster, admit, **fields):
    job = admit(cluster, **fields)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    return job


def _adopted(sim, cluster, admit, annotations, **fields):
    """A job whose Volcano Job carries kubesim behaviour annotations (fail, exit code…).

    The object is created first, exactly as the dispatcher would build it plus the
    annotations, and the dispatcher then adopts it (same submission UID).
    """
    job = admit(cluster, **fields)
    _, manifest = job_manifest(
        Job.objects.select_related("cluster", "gpu_model", "team").get(pk=job.pk)
    )
    manifest["metadata"]["annotations"].update(annotations)
    api = k8s_config.new_client_from_config_dict(sim.kubeconfig_dict())
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", "gpupool", "jobs", manifest
    )
    api.close()
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    return job


def test_a_job_runs_and_succeeds_with_times_and_real_node_bindings(sim, cluster, admit, watchers):
    watchers.start(cluster)
    job = _submitted(sim, cluster, admit, replicas=2, gpus_per_replica=8,
                     nodes=["a100-0", "a100-1"])  # fmt: skip
    sim.advance(3)
    wait_state(job, JobState.RUNNING)
    job.refresh_from_db()
    bound = sorted(p["spec"]["nodeName"] for p in sim.job_pods("gpupool", _name(job)))
    assert bound == ["a100-0", "a100-1"]  # 8 GPUs each, pinned to the two planned nodes
    assert wait_for(lambda: sorted(Job.objects.get(pk=job.pk).node_plan) == bound)
    assert job.started_at is not None
    sim.advance(65)
    wait_state(job, JobState.SUCCEEDED)
    job.refresh_from_db()
    assert job.finished_at is not None and job.finished_at >= job.started_at
    assert _reasons(job)[-2:] == ["Running", "Succeeded"]


def test_an_oom_kill_fails_the_job_and_says_which_replica(sim, cluster, admit, watchers):
    watchers.start(cluster)
    job = _adopted(
        sim,
        cluster,
        admit,
        {"kubesim.gpupool.dev/fail": "OOMKilled", "kubesim.gpupool.dev/fail-after-seconds": "5"},
    )
    sim.advance(3)
    wait_state(job, JobState.RUNNING)
    sim.advance(10)
    wait_state(job, JobState.FAILED)
    oom = _event(job, "OOMKilled")
    assert oom is not None and oom.from_state == oom.to_state
    assert "Replica 0" in oom.message and "exit code 137" in oom.message
    failed = (
        JobEvent.objects.filter(job_id=job.pk, to_state=JobState.FAILED)
        .exclude(from_state=JobState.FAILED)
        .get()
    )
    assert failed.reason.startswith("Volcano") and "OOMKilled" in failed.message


def test_an_exit_code_is_recorded(sim, cluster, admit, watchers):
    watchers.start(cluster)
    job = _adopted(
        sim,
        cluster,
        admit,
        {"kubesim.gpupool.dev/exit-code": "3", "kubesim.gpupool.dev/fail-after-seconds": "5"},
    )
    sim.advance(3)
    sim.advance(10)
    wait_state(job, JobState.FAILED)
    assert "exited with code 3" in _event(job, "ExitCode").message


def test_an_image_that_cannot_be_pulled_is_reported(sim, cluster, admit, watchers):
    watchers.start(cluster)
    job = _submitted(sim, cluster, admit, image="example.org/team/doesnotexist:1")
    sim.advance(3)
    event = wait_for(lambda: _event(job, "ImagePullBackOff"))
    assert event is not None and "Back-off pulling image" in event.message
    assert Job.objects.get(pk=job.pk).state == JobState.SUBMITTED


def test_an_unschedulable_gang_shows_volcanos_message(sim, cluster, admit, watchers):
    watchers.start(cluster)
    job = _submitted(sim, cluster, admit, replicas=3, gpus_per_replica=8)  # 2 nodes have 8
    sim.advance(3)
    event = wait_for(lambda: _event(job, "Unschedulable"), timeout=60)
    assert event is not None and "pods cannot be scheduled" in event.message
    assert "nvidia.com/gpu" in event.message
    count = JobEvent.objects.filter(job_id=job.pk, reason="Unschedulable").count()
    cluster_reconcile_and_enqueue(cluster=cluster)  # the same facts again: no new events
    assert JobEvent.objects.filter(job_id=job.pk, reason="Unschedulable").count() == count


def test_a_pods_problem_seen_before_the_dispatch_recorded_it_is_still_reported(
    sim, cluster, admit, watchers
):
    """The pod watch may see a pod Unschedulable before the dispatcher has recorded the job
    SUBMITTED (a busy database): such a pod sends no later event, so the fact is kept and
    written once the record exists, not lost until the reconcile."""
    _jobs, pods = watchers.start(cluster)
    job = admit(cluster, replicas=3, gpus_per_replica=8)  # 2 nodes have 8
    _, manifest = job_manifest(
        Job.objects.select_related("cluster", "gpu_model", "team").get(pk=job.pk)
    )
    api = k8s_config.new_client_from_config_dict(sim.kubeconfig_dict())
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", "gpupool", "jobs", manifest
    )
    api.close()
    sim.advance(3)
    assert wait_for(lambda: pods._early, timeout=30), "the pod watch never saw the pod"
    assert _event(job, "Unschedulable") is None  # no record yet to hold it
    dispatch(job)  # adopts the object (same submission UID) and records SUBMITTED
    wait_state(job, JobState.SUBMITTED)
    event = wait_for(lambda: _event(job, "Unschedulable"), timeout=30)
    assert event is not None and "nvidia.com/gpu" in event.message


def test_a_lost_node_is_reported(sim, cluster, admit, watchers):
    watchers.start(cluster)
    job = _submitted(sim, cluster, admit, gpus_per_replica=8)
    sim.advance(3)
    wait_state(job, JobState.RUNNING)
    node = sim.job_pods("gpupool", _name(job))[0]["spec"]["nodeName"]
    sim.node_not_ready(node, mode="fail")
    sim.advance(1)
    event = wait_for(lambda: _event(job, "NodeLost"))
    assert event is not None and node in event.message


def test_a_volcano_job_deleted_behind_the_portals_back_fails_the_job(sim, cluster, admit, watchers):
    watchers.start(cluster)
    job = _submitted(sim, cluster, admit)
    api = k8s_config.new_client_from_config_dict(sim.kubeconfig_dict())
    k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", "gpupool", "jobs", _name(job)
    )
    api.close()
    wait_state(job, JobState.FAILED)
    message = _event(job, "VolcanoJobDeleted").message
    assert "lost the Volcano Job" in message and "the portal did not delete it" in message


def test_a_watch_that_expires_relists_without_missing_a_transition(sim, cluster, admit, watchers):
    (jobs_watcher,) = watchers.start(cluster, "jobs", timeout=1)
    job = _submitted(sim, cluster, admit)
    wait_for(lambda: VolcanoJobRecord.objects.filter(job_id=job.pk, phase="Pending").exists())
    # The watcher misses the Running transition, and its next watch answers 410 Gone.
    sim.faults.drop_watch_events(resource="jobs", count=1000)
    sim.faults.expire_next_watch(resource="jobs")
    sim.advance(3)
    wait_state(job, JobState.RUNNING)
    assert jobs_watcher.relists == 1
    assert ClusterWatch.objects.get(cluster=cluster, resource="jobs").relists == 1


def test_a_restarted_watcher_resumes_from_the_stored_version_without_relisting(
    sim, cluster, admit, watchers
):
    watchers.start(cluster, "jobs")
    job = _submitted(sim, cluster, admit)
    wait_for(lambda: VolcanoJobRecord.objects.filter(job_id=job.pk, phase="Pending").exists())
    watchers.stop()  # a portal restart: the version it got to stays on the row
    stored = ClusterWatch.objects.get(cluster=cluster, resource="jobs").resource_version
    assert stored
    lists = sim.faults.add(verb="list", resource="jobs", hang=0.001, count=-1)  # counts lists
    sim.advance(3)  # the job starts running while nobody watches
    watchers.start(cluster, "jobs")
    wait_state(job, JobState.RUNNING)  # replayed from the stored version by the watch
    assert lists.hits == 0
    assert ClusterWatch.objects.get(cluster=cluster, resource="jobs").relists == 0


def test_a_pods_watch_that_expires_relists_and_still_reports_pod_reasons(
    sim, cluster, admit, watchers
):
    (pods_watcher,) = watchers.start(cluster, "pods", timeout=1)
    watchers.start(cluster, "jobs")
    job = _submitted(sim, cluster, admit, image="example.org/team/doesnotexist:1")
    sim.faults.drop_watch_events(resource="pods", count=1000)
    sim.faults.expire_next_watch(resource="pods")
    sim.advance(3)
    assert wait_for(lambda: _event(job, "ImagePullBackOff")), _reasons(job)
    assert pods_watcher.relists == 1
    assert ClusterWatch.objects.get(cluster=cluster, resource="pods").relists == 1


def test_dropped_watch_events_are_healed_by_the_reconcile(sim, cluster, admit, watchers):
    sim.faults.drop_watch_events(resource="*", count=-1)  # the watch sees nothing at all
    watchers.start(cluster)
    job = _submitted(sim, cluster, admit)
    sim.advance(3)
    sim.advance(65)
    assert sim.job_phase("gpupool", _name(job)) == "Completed"
    assert Job.objects.get(pk=job.pk).state == JobState.SUBMITTED
    result = cluster_reconcile_and_enqueue(cluster=cluster)
    assert result.ok, result.message
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED
    assert _reasons(job)[-2:] == ["Running", "Succeeded"]


def test_the_reconcile_redispatches_a_job_whose_message_was_lost(sim, cluster, admit):
    import datetime as dt

    job = admit(cluster)  # admitted, but nobody ever got the message
    Job.objects.filter(pk=job.pk).update(
        state_changed_at=job.state_changed_at - dt.timedelta(minutes=5)
    )
    result = cluster_reconcile_and_enqueue(cluster=cluster)
    assert result.redispatched == [job.pk]
    wait_state(job, JobState.SUBMITTED)


def test_the_reconcile_leaves_a_job_waiting_out_a_backoff_alone(sim, cluster, admit):
    import datetime as dt

    job = admit(cluster)
    long_ago = job.state_changed_at - dt.timedelta(minutes=5)
    # Admitted long ago, but a create failed and its retry is due in a few seconds.
    Job.objects.filter(pk=job.pk).update(
        state_changed_at=long_ago, dispatch_next_at=timezone.now() + dt.timedelta(seconds=5)
    )
    assert cluster_reconcile_and_enqueue(cluster=cluster).redispatched == []
    # Once the retry is long overdue, its message is presumed lost like any other.
    Job.objects.filter(pk=job.pk).update(dispatch_next_at=long_ago)
    assert cluster_reconcile_and_enqueue(cluster=cluster).redispatched == [job.pk]
    wait_state(job, JobState.SUBMITTED)


def test_a_cluster_back_wakes_a_backoff_but_leaves_a_create_in_flight_alone(sim, cluster, admit):
    import datetime as dt

    from clusters.clients import cluster_unreachable_mark
    from portal.models import WorkerBeat

    waiting, in_flight = admit(cluster, name="waiting"), admit(cluster, name="in-flight")
    soon = timezone.now() + dt.timedelta(seconds=60)
    Job.objects.filter(pk=waiting.pk).update(dispatch_next_at=soon)
    WorkerBeat.objects.create(name="other-host:1:abc", seen_at=timezone.now())
    Job.objects.filter(pk=in_flight.pk).update(
        dispatch_next_at=soon, dispatch_owner="other-host:1:abc"
    )
    cluster_unreachable_mark(cluster, "connection refused")
    cluster.refresh_from_db()
    # The cluster answers this reconcile: the job waiting out its backoff is sent now; the one
    # whose create is in flight keeps its claim, so no second create goes beside it.
    assert cluster_reconcile_and_enqueue(cluster=cluster).redispatched == [waiting.pk]
    in_flight.refresh_from_db()
    assert in_flight.dispatch_owner == "other-host:1:abc" and in_flight.dispatch_next_at == soon


def test_an_unknown_phase_is_not_finished_and_is_logged(sim, cluster, admit, caplog):
    job = _submitted(sim, cluster, admit)
    job = Job.objects.select_related("cluster", "team", "volcano").get(pk=job.pk)
    view = JobView(
        job_uuid=job.public_id,
        namespace="gpupool",
        name=_name(job),
        uid="",
        submission_uid=job.volcano.submission_uid,
        phase="Hibernating",
        reason="",
        message="",
        retry_count=0,
        running_since=None,
        finished_at=None,
        deleting=False,
    )
    with caplog.at_level(logging.WARNING, logger="clusters.status"):
        assert job_status_apply(job=job, view=view) == StatusOutcome.UNKNOWN_PHASE
    assert "unknown phase 'Hibernating'" in caplog.text
    assert Job.objects.get(pk=job.pk).state == JobState.SUBMITTED


def test_an_object_from_another_admission_is_ignored(sim, cluster, admit):
    job = _submitted(sim, cluster, admit)
    job = Job.objects.select_related("cluster", "team", "volcano").get(pk=job.pk)
    stale = JobView(
        job_uuid=job.public_id, namespace="gpupool", name=_name(job), uid="", phase="Failed",
        submission_uid=str(uuid.uuid4()), reason="", message="", retry_count=0,
        running_since=None, finished_at=None, deleting=False,
    )  # fmt: skip
    assert job_status_apply(job=job, view=stale) == StatusOutcome.OTHER_LINEAGE
    assert Job.objects.get(pk=job.pk).state == JobState.SUBMITTED
