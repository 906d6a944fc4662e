"""No job stuck holding GPUs: max runtime, pods that cannot start, restarts after an eviction.

The timing is reproduced on kubesim's frozen clock (``sim.advance``) and by handing the
deadlines task the moment to judge (the portal's clock), through the real Celery worker and
the real kubernetes client over HTTPS.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings

from clusters.deadlines import deadlines_enforce
from clusters.models import VolcanoJobRecord
from clusters.tasks import enforce_deadlines
from portal.jobs.state import job_transition
from portal.models import HOLDING_STATES, Job, JobEvent, JobState
from tests.clusters.conftest import dispatch, vcjob_name, wait_deleted, wait_for, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]

S = JobState


def _name(job):
    return vcjob_name(job)


def _vcjob(sim, job):
    return sim.get("vcjob", _name(job), "gpupool")


def _events(job, **filters):
    return list(JobEvent.objects.filter(job_id=job.pk, **filters).order_by("created_at", "id"))


def _bound_nodes(job):
    """The nodes the watcher last saw the job's pods bound to."""
    record = VolcanoJobRecord.objects.filter(job=job).first()
    pods = (record.pods if record else None) or {}
    return sorted(entry["node"] for entry in pods.values() if entry.get("node"))


def _ended(job):
    """The event that moved the job into its terminal state."""
    job.refresh_from_db()
    return (
        JobEvent.objects.filter(job_id=job.pk, to_state=job.state)
        .exclude(from_state=job.state)
        .latest("id")
    )


def _submitted(cluster, admit, **fields):
    job = admit(cluster, **fields)
    dispatch(job)
    wait_state(job, S.SUBMITTED)
    return job


def _judge(moment: dt.datetime) -> None:
    """The beat's task, through the worker, judging the given moment."""
    enforce_deadlines.delay(moment.isoformat())


def _page(client, user, job) -> str:
    client.force_login(user)
    response = client.get(f"/jobs/{job.public_id}/")
    assert response.status_code == 200
    return response.content.decode()


# ---------------------------------------------------------------------------------------------
# Max runtime
# ---------------------------------------------------------------------------------------------
def test_the_pod_deadline_ends_a_job_at_its_max_runtime_as_max_runtime_exceeded(
    sim, cluster, admit, watchers, client, bob
):
    watchers.start(cluster)
    job = _submitted(cluster, admit, max_runtime_seconds=60, command=["sh", "-c", "sleep 3600"])
    sim.advance(3)
    wait_state(job, S.RUNNING)
    sim.advance(56)  # 59 s after the pod's startTime: still inside the limit
    assert Job.objects.get(pk=job.pk).state == S.RUNNING
    sim.advance(2)  # a 1-minute job is stopped at 60 s, not at 150 s
    wait_state(job, S.FAILED)
    ended = _ended(job)
    assert ended.reason == "MaxRuntimeExceeded"
    assert "max runtime of 1 min" in ended.message and "DeadlineExceeded" in ended.message
    fact = wait_for(lambda: _events(job, reason="DeadlineExceeded"))
    assert "Replica 0" in fact[0].message
    assert sim.job_phase("gpupool", _name(job)) == "Terminated"
    page = _page(client, bob, job)
    assert "MaxRuntimeExceeded" in page and "FAILED" in page


def test_the_portal_stops_a_job_past_max_runtime_and_grace_and_holds_its_gpus_until_deleted(
    sim, cluster, admit, watchers
):
    """A cluster that does not enforce the pod deadline (here: its clock has not got there)."""
    watchers.start(cluster)
    job = _submitted(cluster, admit, max_runtime_seconds=60, command=["sh", "-c", "sleep 3600"])
    sim.advance(3)
    wait_state(job, S.RUNNING)
    job.refresh_from_db()
    grace = dt.timedelta(seconds=settings.GPUPOOL_MAX_RUNTIME_GRACE_SECONDS)
    limit = job.started_at + dt.timedelta(seconds=60) + grace

    assert deadlines_enforce(now=limit - dt.timedelta(seconds=1)).cancel == []
    assert Job.objects.get(pk=job.pk).state == S.RUNNING

    deletes = sim.faults.add(verb="delete", resource="jobs", status=503, count=-1)  # slow delete
    _judge(limit + dt.timedelta(seconds=1))
    wait_state(job, S.CANCELLING)
    assert wait_for(lambda: deletes.hits >= 2)
    # The Volcano Job is still there: the job still holds its GPUs in the portal's books.
    assert _vcjob(sim, job) is not None
    assert Job.objects.filter(pk=job.pk, state__in=HOLDING_STATES).exists()
    stopping = _events(job, to_state=S.CANCELLING)
    assert [e.reason for e in stopping] == ["MaxRuntimeExceeded"]
    assert "past its max runtime of 1 min" in stopping[0].message

    sim.faults.clear()
    wait_deleted(sim, job, S.FAILED, timeout=30)
    ended = _ended(job)
    assert ended.reason == "MaxRuntimeExceeded" and "Volcano Job was deleted" in ended.message
    assert _vcjob(sim, job) is None
    assert not Job.objects.filter(pk=job.pk, state__in=HOLDING_STATES).exists()


def test_a_duplicated_deadline_message_stops_the_job_once(sim, cluster, admit, watchers):
    watchers.start(cluster)
    job = _submitted(cluster, admit, max_runtime_seconds=60, command=["sh", "-c", "sleep 3600"])
    sim.advance(3)
    wait_state(job, S.RUNNING)
    job.refresh_from_db()
    late = job.started_at + dt.timedelta(hours=1)
    _judge(late)
    _judge(late)  # a duplicated message, and another worker judging the same moment
    enforce_deadlines(late.isoformat())
    wait_deleted(sim, job, S.FAILED)
    deadlines_enforce(now=late + dt.timedelta(hours=1))  # after the end: nothing to do
    reasons = [
        (e.from_state, e.to_state, e.reason) for e in _events(job) if e.from_state != e.to_state
    ]
    assert reasons[-2:] == [
        (S.RUNNING, S.CANCELLING, "MaxRuntimeExceeded"),
        (S.CANCELLING, S.FAILED, "MaxRuntimeExceeded"),
    ]
    assert len(_events(job, to_state=S.CANCELLING)) == 1


# ---------------------------------------------------------------------------------------------
# Pods that cannot start
# ---------------------------------------------------------------------------------------------
def test_an_image_that_cannot_be_pulled_fails_the_job_after_the_bound_and_frees_its_gpus(
    sim, cluster, admit, watchers, client, bob
):
    watchers.start(cluster)
    job = _submitted(cluster, admit, image="example.org/team/doesnotexist:1")
    sim.advance(3)
    fact = wait_for(lambda: _events(job, reason="ImagePullBackOff"))
    assert fact, "the pod's problem was never reported"
    bound = dt.timedelta(seconds=settings.GPUPOOL_START_FAILURE_SECONDS)
    since = fact[0].created_at

    assert deadlines_enforce(now=since + bound - dt.timedelta(seconds=1)).cancel == []
    assert Job.objects.get(pk=job.pk).state == S.SUBMITTED

    _judge(since + bound + dt.timedelta(seconds=1))
    wait_deleted(sim, job, S.FAILED)
    ended = _ended(job)
    assert ended.reason == "ImagePullBackOff"  # the cluster's reason
    assert "could not start" in ended.message and "doesnotexist" in ended.message
    assert wait_for(lambda: _vcjob(sim, job) is None)
    assert "ImagePullBackOff" in _page(client, bob, job)


def test_a_missing_secret_fails_the_job_with_the_clusters_words_after_the_bound(
    sim, cluster, admit, watchers, client, bob
):
    """A job reading a variable from a Secret that is not in its namespace: the kubelet says
    CreateContainerConfigError, and the portal ends the job with that reason, as a real cluster
    would have it; the Secret's value never passed the portal, only its name."""
    watchers.start(cluster)
    refs = {"HF_TOKEN": {"secret": "hf-credentials", "key": "token"}}
    job = _submitted(cluster, admit, env_from_secrets=refs)
    manifest = _vcjob(sim, job)
    env = manifest["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]
    wanted = {"secretKeyRef": {"name": "hf-credentials", "key": "token"}}
    assert {"name": "HF_TOKEN", "valueFrom": wanted} in env
    sim.advance(3)
    fact = wait_for(lambda: _events(job, reason="CreateContainerConfigError"))
    assert fact, "the pod's problem was never reported"
    assert 'secret "hf-credentials" not found' in fact[0].message

    _judge(fact[0].created_at + dt.timedelta(seconds=settings.GPUPOOL_START_FAILURE_SECONDS + 1))
    wait_deleted(sim, job, S.FAILED)
    assert _ended(job).reason == "CreateContainerConfigError"
    assert "CreateContainerConfigError" in _page(client, bob, job)


def test_an_unschedulable_gang_is_requeued_with_its_place_then_fails_after_the_bound(
    sim, cluster, admit, watchers
):
    from scheduling.models import GpuModel

    watchers.start(cluster)
    job = _submitted(cluster, admit, replicas=3, gpus_per_replica=8)  # 2 nodes have 8
    sim.advance(3)
    assert wait_for(lambda: _events(job, reason="Unschedulable"), timeout=60)
    submitted_at = Job.objects.get(pk=job.pk).submitted_at
    bound = dt.timedelta(seconds=settings.GPUPOOL_UNSCHEDULABLE_SECONDS)
    model = GpuModel.objects.get(key="a100-80gb")
    for round_ in range(settings.GPUPOOL_UNSCHEDULABLE_REQUEUES + 1):
        if round_:  # the scheduler admits it again, and it is dispatched again
            assert job_transition(
                job_id=job.pk, expected=S.QUEUED, to=S.ADMITTED, reason="Admitted",
                updates={"cluster_id": cluster.pk, "gpu_model_id": model.pk,
                         "node_plan": ["a100-0", "a100-1", "a100-0"]},
            )  # fmt: skip
            dispatch(job)
            wait_state(job, S.SUBMITTED)
            sim.advance(3)
        entered = Job.objects.get(pk=job.pk).state_changed_at
        assert deadlines_enforce(now=entered + bound - dt.timedelta(seconds=1)).evict == []
        _judge(entered + bound + dt.timedelta(seconds=1))
        wait_state(job, S.QUEUED, S.FAILED)
        assert wait_for(lambda: _vcjob(sim, job) is None)
    job.refresh_from_db()
    assert job.state == S.FAILED
    assert job.submitted_at == submitted_at  # requeues kept its place in line
    requeues = _events(job, to_state=S.QUEUED)
    assert [e.reason for e in requeues] == ["Requeued"] * settings.GPUPOOL_UNSCHEDULABLE_REQUEUES
    assert "No replica was placed on a node" in requeues[0].message
    assert "Insufficient nvidia.com/gpu" in requeues[0].message
    ended = _ended(job)
    assert ended.reason == "Unschedulable" and "requeue(s)" in ended.message


# ---------------------------------------------------------------------------------------------
# Restarts and evictions
# ---------------------------------------------------------------------------------------------
def test_a_job_evicted_by_a_lost_node_shows_restarting_and_its_retry_budget(
    sim, cluster, admit, watchers, client, bob, api_as
):
    watchers.start(cluster)
    job = _submitted(cluster, admit, replicas=2, gpus_per_replica=8, max_retry=2,
                     command=["sh", "-c", "sleep 3600"], nodes=["a100-0", "a100-1"])  # fmt: skip
    assert _vcjob(sim, job)["spec"]["maxRetry"] == 2
    sim.advance(3)
    wait_state(job, S.RUNNING)
    assert "RUNNING" in _page(client, bob, job)

    sim.node_not_ready("a100-0")  # its pod is evicted; Volcano restarts the gang (RestartJob)
    sim.out_of_service("a100-0")  # the admin vouches it is down: its pod stops Terminating
    sim.advance(2)  # the new gang of 2 × 8 GPUs does not fit while a100-0 is NotReady
    assert sim.job_phase("gpupool", _name(job)) == "Pending"
    restarted = wait_for(lambda: _events(job, reason="VolcanoRestarting"))
    assert restarted and "retry 1 of 2" in restarted[0].message
    pending = wait_for(lambda: _events(job, reason="PodsPending"))
    assert pending and "Pending again after restart 1 of 2" in pending[0].message
    assert Job.objects.get(pk=job.pk).state == S.RUNNING  # the books: it keeps its GPUs
    page = _page(client, bob, job)
    assert "RESTARTING" in page and "state-running" not in page
    # REST says what the page says, with a reason; so do the owner's notifications (once).
    view = api_as(bob).get(f"/api/v1/jobs/{job.public_id}/").json()
    assert (view["state"], view["status"]) == ("RUNNING", "RESTARTING")
    assert "wait to be placed again" in view["status_reason"]
    assert "wait to be placed again" in page
    listed = api_as(bob).get("/api/v1/jobs/").json()["results"]
    assert [j["status"] for j in listed if j["id"] == str(job.public_id)] == ["RESTARTING"]
    notices = list(job.notifications.order_by("id").values_list("kind", "title"))
    assert notices[-1] == ("job.restarting", f"{job.name} is restarting; it keeps its GPUs")
    assert [k for k, _ in notices].count("job.restarting") == 1

    sim.out_of_service("a100-0", False)
    sim.node_ready("a100-0")
    sim.advance(3)
    resumed = wait_for(lambda: _events(job, reason="Resumed"))
    assert resumed
    assert "again after restart 1 of 2" in resumed[0].message
    page = _page(client, bob, job)
    assert "RESTARTING" not in page and "RUNNING" in page
    view = api_as(bob).get(f"/api/v1/jobs/{job.public_id}/").json()
    assert (view["state"], view["status"], view["status_reason"]) == ("RUNNING", "RUNNING", "")
    assert job.notifications.order_by("-id").values_list("kind", "title").first() == (
        "job.running",
        f"{job.name} is running again",
    )


def test_a_restarted_gang_that_cannot_be_placed_again_is_requeued(sim, cluster, admit, watchers):
    watchers.start(cluster)
    job = _submitted(cluster, admit, replicas=2, gpus_per_replica=8,
                     command=["sh", "-c", "sleep 3600"], nodes=["a100-0", "a100-1"])  # fmt: skip
    sim.advance(3)
    wait_state(job, S.RUNNING)
    sim.node_not_ready("a100-1")
    sim.out_of_service("a100-1")  # its pod goes (the pod GC), not left Terminating
    sim.advance(2)
    pending = wait_for(lambda: _events(job, reason="PodsPending"))
    assert pending
    # What the deadline judges: the watcher has seen every replica unplaced (the restart's
    # delete of the pod on a100-0 can reach it after the job's phase does).
    assert wait_for(lambda: not _bound_nodes(job)), _bound_nodes(job)
    bound = dt.timedelta(seconds=settings.GPUPOOL_UNSCHEDULABLE_SECONDS)
    assert deadlines_enforce(now=pending[0].created_at + bound / 2).evict == []
    _judge(pending[0].created_at + bound + dt.timedelta(seconds=1))
    wait_state(job, S.QUEUED)
    requeued = _events(job, to_state=S.QUEUED)[-1]
    assert requeued.reason == "Requeued" and "No replica was placed" in requeued.message
    assert wait_for(lambda: _vcjob(sim, job) is None)
