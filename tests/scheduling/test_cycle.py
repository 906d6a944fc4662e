"""The scheduling cycle against the real PostgreSQL: snapshot, decide, persist."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection
from django.utils import timezone

from portal.jobs.services import job_submit
from portal.models import Job, JobEvent, JobState, Priority
from scheduling import cycle
from scheduling.cycle import CYCLE_LOCK_KEY, run_cycle
from scheduling.models import TeamPolicy
from tests.conftest import job_body
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def submit(user, **overrides):
    return job_submit(user=user, data=job_body(**overrides)).job


def test_a_queued_job_is_admitted_with_a_model_a_cluster_and_a_reason(bob, vision, pool, quota):
    pool("east", "a100-80gb", nodes=2, gpus=8)
    quota(vision, "a100-80gb", nominal=16)
    job = submit(bob, replicas=2, gpus_per_replica=4)
    result = run_cycle()
    assert result.admitted == [job.pk]
    job.refresh_from_db()
    assert (job.state, job.cluster.name, job.gpu_model.key) == (
        JobState.ADMITTED,
        "east",
        "a100-80gb",
    )
    assert len(job.node_plan) == 2
    assert job.placement["model"] == "a100-80gb" and job.placement["message"]
    event = job.events.get(to_state=JobState.ADMITTED)
    assert event.from_state == JobState.QUEUED and event.message == job.placement["message"]


def test_the_cheapest_adequate_model_wins(bob, vision, pool, quota):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    pool("east", "t4", nodes=1, gpus=4)
    quota(vision, "a100-80gb", nominal=8)
    quota(vision, "t4", nominal=4)
    job = submit(bob, kind="inference", replicas=1, gpus_per_replica=1, min_gpu_memory_gib=12)
    run_cycle()
    job.refresh_from_db()
    assert job.gpu_model.key == "t4"
    skipped = {s["model"]: s["code"] for s in job.placement["skipped"]}
    assert skipped["a100-80gb"] == "NOT_TRIED"


def test_the_job_page_folds_the_models_it_did_not_take(client, bob, vision, pool, quota):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    pool("east", "t4", nodes=1, gpus=4)
    quota(vision, "a100-80gb", nominal=8)
    quota(vision, "t4", nominal=4)
    job = submit(bob, kind="inference", replicas=1, gpus_per_replica=1, min_gpu_memory_gib=12)
    run_cycle()
    client.force_login(bob)
    page = client.get(f"/jobs/{job.public_id}/").content.decode()
    folded = page.split('id="placement-models"', 1)[1].split("</details>", 1)[0]
    job.refresh_from_db()
    count = len(job.placement["skipped"])
    assert f"Other models ({count}): why not them" in folded and "a100-80gb: not tried" in folded
    assert not folded.split(">", 1)[0].strip().endswith("open")  # closed until the user opens it


def test_jobs_that_do_not_fit_get_a_reason_and_a_position(bob, vision, pool, quota):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=8)
    first = submit(bob, name="first", replicas=1, gpus_per_replica=8)
    second = submit(bob, name="second", replicas=1, gpus_per_replica=8)
    third = submit(bob, name="third", replicas=1, gpus_per_replica=8)
    run_cycle()
    for job in (first, second, third):
        job.refresh_from_db()
    assert first.state == JobState.ADMITTED
    assert (second.state, second.queue_position, third.queue_position) == (JobState.QUEUED, 1, 2)
    assert second.pending_reason_code and "A100" in second.pending_reason.upper()


def test_a_held_team_admits_nothing_and_says_so(bob, vision, pool, quota):
    pool("east", "t4", nodes=1, gpus=4)
    quota(vision, "t4", nominal=4)
    TeamPolicy.objects.create(team=vision, held=True)
    job = submit(bob, replicas=1, gpus_per_replica=1, min_gpu_memory_gib=None)
    assert run_cycle().admitted == []
    job.refresh_from_db()
    assert (job.state, job.pending_reason_code) == (JobState.QUEUED, "TEAM_HELD")


def test_a_draining_cluster_gets_nothing_new(bob, vision, pool, quota):
    east = pool("east", "t4", nodes=1, gpus=4)
    east.state = "draining"
    east.save()
    quota(vision, "t4", nominal=4)
    job = submit(bob, replicas=1, gpus_per_replica=1, min_gpu_memory_gib=None)
    run_cycle()
    job.refresh_from_db()
    assert (job.state, job.pending_reason_code) == (JobState.QUEUED, "CLUSTER_DRAINING")


def test_gpus_of_admitted_jobs_are_not_handed_out_twice_across_cycles(bob, vision, pool, quota):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=100)
    jobs = [submit(bob, name=f"j{i}", replicas=1, gpus_per_replica=4) for i in range(3)]
    run_cycle()
    run_cycle()
    states = sorted(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True))
    assert states == [JobState.ADMITTED, JobState.ADMITTED, JobState.QUEUED]


def test_a_team_within_nominal_reclaims_from_a_borrower(
    alice, charlie, vision, language, pool, quota
):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=8)
    quota(language, "a100-80gb", nominal=0)
    borrower = job_submit(
        user=charlie, data=job_body(team="language", replicas=1, gpus_per_replica=8)
    ).job
    run_cycle()
    borrower.refresh_from_db()
    assert borrower.state == JobState.ADMITTED  # on Vision's idle quota
    claimer = submit(alice, replicas=1, gpus_per_replica=8)
    result = run_cycle()
    borrower.refresh_from_db()
    assert result.preempted == [borrower.pk]
    assert borrower.state == JobState.PREEMPTING
    event = borrower.events.get(to_state=JobState.PREEMPTING)
    assert event.message
    claimer.refresh_from_db()
    assert claimer.state == JobState.QUEUED and claimer.pending_reason_code == "PREEMPTING"


def test_a_crash_while_persisting_leaves_no_half_admitted_job(
    bob, vision, pool, quota, monkeypatch
):
    pool("east", "a100-80gb", nodes=2, gpus=8)
    quota(vision, "a100-80gb", nominal=16)
    jobs = [submit(bob, name=f"j{i}", replicas=1, gpus_per_replica=8) for i in range(3)]

    def crash(*args, **kwargs):
        raise RuntimeError("worker killed mid-cycle")

    monkeypatch.setattr(cycle, "_write_reasons", crash)
    with pytest.raises(RuntimeError):
        run_cycle()
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True)) == {
        JobState.QUEUED
    }
    assert not JobEvent.objects.filter(to_state=JobState.ADMITTED).exists()
    monkeypatch.undo()
    assert len(run_cycle().admitted) == 2  # the next cycle does the work


def test_a_cycle_while_another_holds_the_lock_does_nothing(bob, vision, pool, quota):
    from django.db import connections

    pool("east", "t4", nodes=1, gpus=4)
    quota(vision, "t4", nominal=4)
    submit(bob, replicas=1, gpus_per_replica=1, min_gpu_memory_gib=None)
    other = connections.create_connection("default")
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", [CYCLE_LOCK_KEY])
        assert run_cycle().ran is False
        assert Job.objects.get().state == JobState.QUEUED
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", [CYCLE_LOCK_KEY])
    finally:
        other.close()
    assert run_cycle().ran is True


@pytest.mark.django_db(transaction=True)
def test_two_cycles_started_at_once_admit_nothing_twice(bob, vision, pool, quota):
    pool("east", "a100-80gb", nodes=4, gpus=8)
    quota(vision, "a100-80gb", nominal=32)
    jobs = [submit(bob, name=f"j{i}", replicas=1, gpus_per_replica=8) for i in range(6)]
    barrier = threading.Barrier(2)
    results = []

    def go() -> None:
        barrier.wait()
        try:
            results.append(run_cycle())
        finally:
            connection.close()

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    admitted = [pk for r in results for pk in r.admitted]
    assert len(admitted) == len(set(admitted)) == 4
    assert JobEvent.objects.filter(job__in=jobs, to_state=JobState.ADMITTED).count() == 4


def test_a_deep_queue_drains_within_one_cycle(bob, vision, pool, quota):
    pool("east", "t4", nodes=10, gpus=4)
    quota(vision, "t4", nominal=40)
    JobFactory.create_batch(
        60,
        team=vision,
        owner=bob,
        gpus_per_replica=1,
        submitted_at=timezone.now() - dt.timedelta(minutes=1),
    )
    result = run_cycle()
    assert len(result.admitted) == 40
    assert Job.objects.filter(state=JobState.QUEUED, wait__order_key__isnull=False).count() == 20


def test_a_job_on_a_mig_slice_is_charged_to_that_slice_only(bob, vision, pool, quota):
    """A MIG node is one inventory row per resource; a planned slice job must not make the
    node's other resources look used."""
    from clusters.models import Node
    from scheduling.models import GpuModel

    east = pool("east", "a100-80gb-mig-1g.10gb", nodes=1, gpus=7)
    Node.objects.create(
        cluster=east,
        name="a100-80gb-mig-1g.10gb-0",
        gpu_model=GpuModel.objects.get(key="a100-80gb-mig-3g.40gb"),
        gpu_resource="nvidia.com/mig-3g.40gb",
        gpu_capacity=2,
        gpu_allocatable=2,
        last_seen_at=timezone.now(),
    )
    quota(vision, "a100-80gb-mig-1g.10gb", nominal=7)
    quota(vision, "a100-80gb-mig-3g.40gb", nominal=2)
    small = submit(
        bob,
        name="small",
        replicas=1,
        gpus_per_replica=7,
        gpu_models=["a100-80gb-mig-1g.10gb"],
        min_gpu_memory_gib=None,
    )
    run_cycle()
    big = submit(
        bob,
        name="big",
        replicas=1,
        gpus_per_replica=2,
        gpu_models=["a100-80gb-mig-3g.40gb"],
        min_gpu_memory_gib=None,
    )
    run_cycle()
    small.refresh_from_db()
    big.refresh_from_db()
    assert (small.state, big.state) == (JobState.ADMITTED, JobState.ADMITTED)


@pytest.mark.django_db(transaction=True)
def test_a_cycle_requested_while_another_runs_is_run_after_it(bob, vision, pool, quota):
    """The trigger of a job queued during a running cycle must not be swallowed by the lock:
    its task, finding the lock taken, asks again a moment later (not at beat's next tick)."""
    from celery.signals import after_task_publish
    from django.core.cache import cache
    from django.db import connections

    from scheduling.tasks import CYCLE_PENDING_KEY, cycle_request, run_cycle_task

    published: list[dict] = []

    def seen(sender=None, headers=None, **_):
        if sender == "scheduling.run_cycle":
            published.append(headers or {})

    after_task_publish.connect(seen, weak=False)
    other = connections.create_connection("default")
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", [CYCLE_LOCK_KEY])
        cache.delete(CYCLE_PENDING_KEY)
        run_cycle_task()  # runs here, finds the lock taken
        assert cache.get(CYCLE_PENDING_KEY), "a cycle is still owed"
        assert len(published) == 1 and published[0].get("eta"), "asked again, a moment later"
        cycle_request()  # another trigger meanwhile joins the owed cycle
        assert len(published) == 1
    finally:
        after_task_publish.disconnect(seen)
        cache.delete(CYCLE_PENDING_KEY)
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", [CYCLE_LOCK_KEY])
        other.close()


@pytest.mark.django_db(transaction=True)
def test_triggered_cycles_start_at_least_the_minimum_gap_apart(settings):
    """A trigger right after a cycle started waits out the gap; one after the gap runs now."""
    import time

    from celery.signals import after_task_publish
    from django.core.cache import cache

    from scheduling.tasks import CYCLE_PENDING_KEY, CYCLE_STARTED_KEY, cycle_request

    settings.GPUPOOL_SCHEDULER_MIN_GAP_MS = 300
    published: list[dict] = []

    def seen(sender=None, headers=None, **_):
        if sender == "scheduling.run_cycle":
            published.append(headers or {})

    after_task_publish.connect(seen, weak=False)
    try:
        cache.delete(CYCLE_PENDING_KEY)
        cache.set(CYCLE_STARTED_KEY, time.time())
        cycle_request()
        assert len(published) == 1 and published[0].get("eta"), "held back until the gap is over"
        eta = dt.datetime.fromisoformat(published[0]["eta"])
        wait = (eta - timezone.now()).total_seconds()
        assert 0.1 < wait <= 0.3

        cache.delete(CYCLE_PENDING_KEY)
        cache.set(CYCLE_STARTED_KEY, time.time() - 5)
        cycle_request()
        assert len(published) == 2 and not published[1].get("eta"), "long after: at once"
    finally:
        after_task_publish.disconnect(seen)
        cache.delete(CYCLE_PENDING_KEY)
        cache.delete(CYCLE_STARTED_KEY)


@pytest.mark.django_db(transaction=True)
def test_a_scheduler_lock_that_cannot_be_unlocked_goes_with_its_connection():
    """Workers keep connections between tasks: a lock left on one would block every cycle."""
    from django.db import DatabaseError, connections, transaction

    with pytest.raises(DatabaseError), transaction.atomic(), cycle.scheduler_lock() as got:
        assert got
        with connection.cursor() as cur:
            cur.execute("SELECT 1/0")  # the transaction is aborted: the unlock will fail
    other = connections.create_connection("default")
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [CYCLE_LOCK_KEY])
            assert cur.fetchone()[0], "the lock went with the closed connection"
            cur.execute("SELECT pg_advisory_unlock(%s)", [CYCLE_LOCK_KEY])
    finally:
        other.close()


def _allow(team, top: Priority) -> None:
    TeamPolicy.objects.update_or_create(team=team, defaults={"max_priority": top})


def test_while_its_policy_allows_it_high_goes_first(alice, charlie, vision, language, pool, quota):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=8)
    quota(language, "a100-80gb", nominal=8)
    first = submit(charlie, team="language", replicas=1, gpus_per_replica=8)
    _allow(vision, Priority.HIGH)
    late = submit(alice, priority="high", replicas=1, gpus_per_replica=8)
    run_cycle()
    first.refresh_from_db()
    late.refresh_from_db()
    assert (first.state, late.state) == (JobState.QUEUED, JobState.ADMITTED)


def test_a_lowered_policy_takes_the_old_jobs_rank_away(
    alice, charlie, vision, language, pool, quota
):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=8)
    quota(language, "a100-80gb", nominal=8)
    first = submit(charlie, team="language", replicas=1, gpus_per_replica=8)
    _allow(vision, Priority.HIGH)
    late = submit(alice, priority="high", replicas=1, gpus_per_replica=8)
    _allow(vision, Priority.NORMAL)  # lowered after the submit
    run_cycle()
    first.refresh_from_db()
    late.refresh_from_db()
    assert (first.state, late.state) == (JobState.ADMITTED, JobState.QUEUED)
    assert late.priority == Priority.HIGH  # what was submitted is still what the job shows


@pytest.mark.parametrize(
    ("language_top", "victim"),
    [(Priority.HIGH, "lo"), (Priority.NORMAL, "hi")],
    ids=["high still allowed: shielded", "policy lowered: no longer shielded"],
)
def test_a_victim_is_chosen_by_the_priority_its_team_may_use_now(
    alice, charlie, vision, language, pool, quota, language_top, victim
):
    """Language borrows all 8 GPUs (Vision's and Robotics' idle nominal), first with a normal
    job, then with a high one; Vision reclaims its 4.
    Lowest priority goes first, then the most recently started: with high allowed the normal
    job is preempted; with Language's policy lowered both count as normal and the later one
    (the high job) is."""
    from tests.factories import TeamFactory

    pool("east", "a100-80gb", nodes=2, gpus=4)
    quota(vision, "a100-80gb", nominal=4)
    quota(TeamFactory(name="Robotics", slug="robotics"), "a100-80gb", nominal=4)  # idle: lends
    quota(language, "a100-80gb", nominal=0)
    _allow(language, Priority.HIGH)
    submit(charlie, team="language", name="lo", replicas=1, gpus_per_replica=4)
    run_cycle()
    submit(charlie, team="language", name="hi", priority="high", replicas=1, gpus_per_replica=4)
    run_cycle()
    admitted = Job.objects.filter(state=JobState.ADMITTED)
    assert sorted(admitted.values_list("name", flat=True)) == ["hi", "lo"]
    _allow(language, language_top)
    submit(alice, name="reclaim", replicas=1, gpus_per_replica=4)
    run_cycle()
    assert list(Job.objects.filter(state=JobState.PREEMPTING).values_list("name", flat=True)) == [
        victim
    ]
