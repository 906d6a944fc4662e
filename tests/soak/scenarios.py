"""The soak's scenarios: each injects its faults into the running stack and returns a row of
figures, judged against the cluster's truth.

A scenario's jobs have converged when each is in a state the cluster explains: QUEUED or
CANCELLED with no Volcano Job, SUBMITTED or RUNNING with exactly one that has not finished,
SUCCEEDED with a completed one (or none, once its time to live passed), FAILED for a reason
the scenario's faults explain; never ADMITTED, CANCELLING or PREEMPTING, never two Volcano
Jobs. *Lost* counts answers 201 whose job does not exist and jobs failed for no reason the
faults explain; *duplicated* the jobs ever seen with two Volcano Jobs; *stuck* the jobs not
converged when the scenario's time is up; *converge* the seconds from the last fault to the
moment every job had converged.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.soak.harness import (
    IN_FLIGHT,
    RACE_GPUS,
    RACE_TEAM,
    TEAMS,
    Submits,
    World,
    retrying,
)

FINISHED_PHASES = {"Completed", "Failed", "Terminated", "Aborted"}
VERBOSE = bool(os.environ.get("GPUPOOL_SOAK_VERBOSE"))


@dataclass
class Tier:
    name: str
    submits: int
    clients: int
    kills_per_point: int
    watcher_kills: int
    faults_each: int
    freeze_seconds: float
    race_jobs: int
    converge_timeout: float
    node_faults: int = 1  # running jobs moved off a failed node, per kind of failure


SHORT = Tier("short", submits=50, clients=10, kills_per_point=1, watcher_kills=1, faults_each=4,
             freeze_seconds=6, race_jobs=20, converge_timeout=90)  # fmt: skip
FULL = Tier("full", submits=500, clients=50, kills_per_point=25, watcher_kills=3, faults_each=100,
            freeze_seconds=30, race_jobs=60, converge_timeout=240, node_faults=3)  # fmt: skip


@dataclass
class Row:
    name: str
    jobs: int = 0
    faults: int = 0
    lost: int = 0
    duplicated: int = 0
    stuck: int = 0
    converge_s: float | None = None
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.stuck or self.problems)


# ---------------------------------------------------------------------------------------------
# The truth
# ---------------------------------------------------------------------------------------------
@dataclass
class Verdict:
    pending: dict[int, str]  # job pk -> why it has not converged
    twins: set[str]
    unexplained: dict[int, str]  # job pk -> failure reason the faults do not explain
    states: Counter[str]


def verdict(
    world: World, job_ids: Iterable[str], explained: set[str], allow_queued: bool = False
) -> Verdict:
    """Where the jobs stand against the cluster's truth (read through the official client)."""
    from portal.models import Job, JobEvent

    ids = list(job_ids)

    def rows() -> list[tuple[Any, ...]]:
        return list(Job.objects.filter(public_id__in=ids).values_list("pk", "public_id", "state"))

    jobs = retrying(rows)
    objects = retrying(world.volcano_jobs)
    twins = {job_id for job_id, items in objects.items() if len(items) > 1}
    pending: dict[int, str] = {}
    failed: list[int] = []
    for pk, public_id, state in jobs:
        mine = objects.get(str(public_id), [])
        phase = ((mine[0].get("status") or {}).get("state") or {}).get("phase") if mine else None
        if state in IN_FLIGHT or (state == "QUEUED" and not allow_queued):
            pending[pk] = state  # every scenario's quota lets its jobs in: QUEUED is not done
        elif state in ("QUEUED", "CANCELLED") and mine:
            pending[pk] = f"{state} with a Volcano Job left"
        elif state in ("SUBMITTED", "RUNNING") and not mine:
            pending[pk] = f"{state} without a Volcano Job"
        elif state in ("SUBMITTED", "RUNNING") and phase in FINISHED_PHASES:
            pending[pk] = f"{state} but the Volcano Job is {phase}"
        elif state == "SUCCEEDED" and mine and phase != "Completed":
            pending[pk] = f"SUCCEEDED but the Volcano Job is {phase}"
        elif state == "FAILED":
            failed.append(pk)
    reasons = dict(
        retrying(
            lambda: list(
                JobEvent.objects.filter(job_id__in=failed, to_state="FAILED")
                .exclude(from_state="FAILED")
                .values_list("job_id", "reason")
            )
        )
    )
    unexplained = {pk: r for pk, r in reasons.items() if r not in explained}
    return Verdict(pending, twins, unexplained, Counter(s for _, _, s in jobs))


def converge(
    world: World,
    row: Row,
    job_ids: Iterable[str],
    *,
    since: float,
    timeout: float,
    explained: set[str] = frozenset(),  # type: ignore[assignment]
    also: Callable[[], bool] | None = None,
    allow_queued: bool = False,
) -> Verdict:
    """Wait until every job has converged (and ``also`` holds); fill in the row's figures."""
    ids = list(job_ids)
    twins: set[str] = set()
    deadline = time.monotonic() + timeout
    while True:
        seen = verdict(world, ids, explained, allow_queued)
        twins |= seen.twins
        done = not seen.pending and (also is None or also())
        if done or time.monotonic() > deadline:
            break
        if VERBOSE:
            print(f"      waiting {time.monotonic() - since:5.1f} s: "
                  f"{Counter(seen.pending.values()).most_common(4)}", flush=True)  # fmt: skip
        time.sleep(1.0)
    row.duplicated += len(twins)
    row.stuck += len(seen.pending)
    row.lost += len(seen.unexplained)
    if done:
        row.converge_s = max(row.converge_s or 0.0, time.monotonic() - since)
    if seen.pending:
        sample = Counter(seen.pending.values()).most_common(3)
        row.problems.append(f"not converged: {sample}")
    if seen.unexplained:
        row.problems.append(f"failed: {Counter(seen.unexplained.values()).most_common(3)}")
    if twins:
        row.problems.append(f"two Volcano Jobs: {sorted(twins)[:3]}")
    return seen


def missing_rows(world: World, submits: Submits) -> int:
    """Answers 201 whose job does not exist."""
    from portal.models import Job

    found = retrying(
        lambda: set(
            str(u) for u in Job.objects.filter(public_id__in=list(submits.accepted)).values_list(
                "public_id", flat=True)
        )
    )  # fmt: skip
    return len(set(submits.accepted) - found)


def _answers(submits: Submits) -> str:
    parts = [f"{code}×{n}" for code, n in sorted(submits.statuses.items())]
    if submits.transport_errors:
        parts.append(f"no answer×{submits.transport_errors}")
    return "answers " + " ".join(parts)


def _judge_answers(row: Row, submits: Submits) -> None:
    row.notes.append(_answers(submits))
    errors = sum(n for code, n in submits.statuses.items() if code >= 500 and code != 503)
    if errors:
        row.problems.append(f"{errors} answers 5xx other than 503")
    if submits.not_json:
        row.problems.append(f"{submits.not_json} error answers not in JSON")
    if submits.without_retry_after:
        row.problems.append(f"{submits.without_retry_after} 503 without Retry-After")


def _deaths(world: World, row: Row) -> None:
    dead = [name for name, s in world.stack.services.items() if not s.alive]
    if dead:
        row.problems.append(f"processes that died by themselves: {dead}")
        for name in dead:
            world.stack.restart(name)


# ---------------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------------
def submits_from_many_clients(world: World, tier: Tier) -> Row:
    row = Row(f"{tier.submits} submits, {tier.clients} clients, {len(TEAMS)} teams")
    began = time.monotonic()
    submits = world.submit_many(tier.submits, clients=tier.clients, seconds=8)
    row.jobs = len(submits.accepted)
    _judge_answers(row, submits)
    row.lost += missing_rows(world, submits)
    row.notes.append(f"{tier.submits / (time.monotonic() - began):.0f} submits/s")
    converge(world, row, submits.accepted, since=began, timeout=tier.converge_timeout)
    _deaths(world, row)
    return row


def _owner_service(world: World, job_ids: list[str]) -> str | None:
    """The worker service whose process holds the dispatch of one of these jobs."""
    from portal.models import Job

    owners = [
        o
        for o in Job.objects.filter(public_id__in=job_ids).values_list("dispatch_owner", flat=True)
        if o
    ]
    pids = {name: pid for name, pid in world.stack.worker_pids().items()}
    for owner in owners:
        with contextlib.suppress(ValueError, IndexError):
            pid = int(owner.split(":")[1])
            for name, service_pid in pids.items():
                if service_pid == pid:
                    return name
    return None


def _kill_and_restart(world: World, names: list[str]) -> None:
    """kill -9, then what a supervisor does: start it again (without waiting for it)."""
    for name in names:
        world.stack.services[name].kill()
    for name in names:
        world.stack.services[name].start(world.stack.env())


def _workers_ready(world: World) -> None:
    for name in world.stack.services:
        if name.startswith("worker"):
            world.stack.wait_worker_ready(name)


def _receiver(world: World, task_id: str, timeout: float = 20) -> str | None:
    """The worker whose log says it received ``task_id``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, service in world.stack.services.items():
            if name.startswith("worker") and task_id in service.log.read_text(errors="replace"):
                return name
        time.sleep(0.05)
    return None


WORKER_KILL_POINTS = ("before create", "after create, before commit", "after commit, before ack",
                      "mid status update")  # fmt: skip


def worker_kills(world: World, tier: Tier) -> list[Row]:
    """kill -9 of a worker at each fault point, then the supervisor's restart: one row per
    point (the rounds interleave the points, so every point sees the same load)."""
    sim = world.sim
    assert sim is not None
    rows = {
        point: Row(f"kill -9 of a worker, {point} x {tier.kills_per_point}")
        for point in WORKER_KILL_POINTS
    }
    ids: list[str] = []
    for round_ in range(tier.kills_per_point):
        for point in WORKER_KILL_POINTS:
            row = rows[point]
            submits = Submits()
            if point == "before create":  # the create stalls, then is refused: never applied
                sim.faults.add(verb="create", resource="jobs", hang=1.5, status=503, count=1)
            elif point == "after create, before commit":  # stalls, then applied
                sim.faults.add(verb="create", resource="jobs", hang=1.5, count=1)
            elif point == "mid status update":  # the reconcile's list stalls
                sim.faults.add(verb="list", resource="jobs", hang=1.5, count=1)
            fired = sim.faults.count()
            world.submit(TEAMS[round_ % len(TEAMS)], 0, 10_000 + round_, submits, seconds=8)
            ids += list(submits.accepted)
            row.jobs += len(submits.accepted)
            victim: list[str] = []
            deadline = time.monotonic() + 20
            if point == "after commit, before ack":
                from portal.models import Job

                mine = list(submits.accepted)
                while time.monotonic() < deadline and not victim:
                    state = retrying(
                        lambda mine=mine: (
                            Job.objects.filter(public_id__in=mine)
                            .values_list("state", flat=True)
                            .first()
                        )
                    )
                    if state in ("SUBMITTED", "RUNNING"):
                        victim = [_owner_service(world, list(submits.accepted)) or "worker0"]
                    time.sleep(0.01)
            elif point == "mid status update":
                from clusters import tasks

                task = tasks.reconcile_cluster.delay(world.cluster_id)
                while time.monotonic() < deadline and sim.faults.count() == fired:
                    time.sleep(0.02)
                receiver = _receiver(world, task.id)
                victim = [receiver] if receiver else [n for n in world.stack.services
                                                      if n.startswith("worker")]  # fmt: skip
            else:
                while time.monotonic() < deadline and sim.faults.count() == fired:
                    time.sleep(0.02)
                owner = _owner_service(world, list(submits.accepted))
                victim = [owner] if owner else [n for n in world.stack.services
                                                if n.startswith("worker")]  # fmt: skip
            began = time.monotonic()
            _kill_and_restart(world, victim)
            row.faults += 1
            sub = Row("")
            converge(world, sub, submits.accepted, since=began, timeout=tier.converge_timeout)
            row.converge_s = max(row.converge_s or 0.0, sub.converge_s or 0.0)
            row.problems += sub.problems
            row.stuck += sub.stuck
            row.lost += sub.lost
            row.duplicated += sub.duplicated
            _workers_ready(world)
    for row in rows.values():
        row.notes.append("converge: worst round, from the kill (the killed worker restarted)")
    last = rows[WORKER_KILL_POINTS[-1]]
    # Every kill's job once more, all together: a later kill must not have undone an earlier
    # round's job (counted on the last point's row, which ran last).
    final = Row("")
    converge(world, final, ids, since=time.monotonic(), timeout=tier.converge_timeout)
    last.problems += [f"after all the kills: {p}" for p in final.problems]
    last.duplicated += final.duplicated
    _deaths(world, last)
    return list(rows.values())


def watcher_kills(world: World, tier: Tier) -> Row:
    row = Row(f"kill -9 of the watcher x {tier.watcher_kills}")
    worst = 0.0
    for _ in range(tier.watcher_kills):
        world.stack.services["watcher"].kill()
        submits = world.submit_many(5, clients=5, seconds=4)
        row.jobs += len(submits.accepted)
        began = time.monotonic()
        world.stack.restart("watcher")
        row.faults += 1
        from portal.models import Job

        ids = list(submits.accepted)

        def seen_running(ids: list[str] = ids) -> bool:
            states = set(
                retrying(
                    lambda: list(
                        Job.objects.filter(public_id__in=ids).values_list("state", flat=True)
                    )
                )
            )
            return states <= {"RUNNING", "SUCCEEDED"}

        sub = Row("")
        converge(world, sub, submits.accepted, since=began, timeout=tier.converge_timeout,
                 also=seen_running)  # fmt: skip
        worst = max(worst, sub.converge_s or 0.0)
        row.stuck += sub.stuck
        row.lost += sub.lost
        row.duplicated += sub.duplicated
        row.problems += sub.problems
    row.converge_s = worst
    row.notes.append("converge: restart to every job seen RUNNING (no reconcile needed)")
    _deaths(world, row)
    return row


def _submitting(world: World, seconds: float, clients: int) -> tuple[Submits, threading.Thread]:
    """Clients that submit for ``seconds`` (started now); join the thread for the answers."""
    out = Submits()
    stop_at = time.monotonic() + seconds
    serial = iter(range(1_000_000))
    lock = threading.Lock()

    def client(index: int) -> None:
        team = TEAMS[index % len(TEAMS)]
        while time.monotonic() < stop_at:
            with lock:
                n = next(serial)
            world.submit(team, index // len(TEAMS), 50_000 + n, out, seconds=30)
            time.sleep(0.2)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()

    def join_all() -> None:
        for thread in threads:
            thread.join()

    joiner = threading.Thread(target=join_all)
    joiner.start()
    return out, joiner


def redis_restart(world: World, tier: Tier) -> Row:
    row = Row("Redis restarted (empty), work queued, submits arriving")
    queued = world.submit_many(20, clients=10, seconds=30)  # work in flight
    submits, joiner = _submitting(world, seconds=10, clients=3)
    time.sleep(2)
    world.stack.redis.restart(down_for=4.0)
    began = time.monotonic()
    row.faults = 1
    joiner.join()
    ids = list(queued.accepted) + list(submits.accepted)
    row.jobs = len(ids)
    _judge_answers(row, submits)
    row.lost += missing_rows(world, submits) + missing_rows(world, queued)
    converge(world, row, ids, since=began, timeout=tier.converge_timeout)
    _deaths(world, row)
    return row


def postgres_restart(world: World, tier: Tier) -> Row:
    row = Row("PostgreSQL restarted mid-run")
    queued = world.submit_many(20, clients=10, seconds=30)
    submits, joiner = _submitting(world, seconds=14, clients=3)
    time.sleep(2)
    from django.db import connections

    world.stack.postgres.stop()
    connections.close_all()
    time.sleep(8.0)
    world.stack.postgres.start()
    began = time.monotonic()
    row.faults = 1
    joiner.join()
    ids = list(queued.accepted) + list(submits.accepted)
    row.jobs = len(ids)
    _judge_answers(row, submits)
    row.notes.append("down 8 s")
    row.lost += missing_rows(world, submits) + missing_rows(world, queued)
    converge(world, row, ids, since=began, timeout=tier.converge_timeout)
    _deaths(world, row)
    return row


def _faulted(world: World, tier: Tier, name: str, arm: Callable[[int], None], *,
             explained: set[str] = frozenset(), jobs: int | None = None,  # type: ignore[assignment]
             seconds: int = 6) -> Row:  # fmt: skip
    return _faulted_submits(world, tier, name, arm, explained=explained, jobs=jobs,
                            seconds=seconds)[0]  # fmt: skip


def _faulted_submits(world: World, tier: Tier, name: str, arm: Callable[[int], None], *,
                     explained: set[str] = frozenset(),  # type: ignore[assignment]
                     jobs: int | None = None, seconds: int = 6) -> tuple[Row, Submits]:  # fmt: skip
    """:func:`_faulted`, with the submits of the row's own jobs."""
    row = Row(name)
    count = tier.faults_each
    arm(count)
    fired_before = _fired(world)
    submits = world.submit_many(jobs or count, clients=min(10, jobs or count), seconds=seconds)
    row.jobs = len(submits.accepted)
    _judge_answers(row, submits)
    row.lost += missing_rows(world, submits)
    began = time.monotonic()
    converge(world, row, submits.accepted, since=began, timeout=tier.converge_timeout,
             explained=explained)  # fmt: skip
    row.faults = _fired(world) - fired_before
    assert world.sim is not None
    world.sim.faults.clear()
    _deaths(world, row)
    return row, submits


def _fired(world: World) -> int:
    assert world.sim is not None
    return len(world.sim.faults.records())


def cluster_faults(world: World, tier: Tier) -> list[Row]:
    sim = world.sim
    assert sim is not None
    rows = [
        _faulted(world, tier, f"create answered 500 x {tier.faults_each}",
                 lambda n: sim.faults.add(verb="create", resource="jobs", status=500, count=n)),
        _faulted(world, tier, f"create answered 409 x {tier.faults_each}",
                 lambda n: sim.faults.add(verb="create", resource="jobs", status=409, count=n)),
        _faulted(world, tier, f"create read timeout x {tier.faults_each}",
                 lambda n: sim.faults.add(verb="create", resource="jobs", hang=5.0, count=n)),
    ]  # fmt: skip
    rows.append(_retry_after(world, tier))
    rows.append(_watch_faults(world, tier))
    rows.append(_frozen(world, tier))
    rows.append(_restarted_empty(world, tier))
    return rows


def _retry_after(world: World, tier: Tier) -> Row:
    """429 with Retry-After: each retried create came at least that long after."""
    from portal.models import Job

    sim = world.sim
    assert sim is not None
    wait = 2
    row, submits = _faulted_submits(
        world, tier, f"create answered 429, Retry-After {wait} s x {tier.faults_each}",
        lambda n: sim.faults.add(verb="create", resource="jobs", status=429, retry_after=wait,
                                 count=n),
    )  # fmt: skip
    ids = retrying(
        lambda: list(
            Job.objects.filter(public_id__in=list(submits.accepted)).values_list("pk", flat=True)
        )
    )
    judged = retrying(lambda: retry_after_judged(ids, wait))
    row.notes.append(
        f"{judged.refusals} retries after a 429, {len(judged.early)} sooner than Retry-After"
    )
    if judged.early:
        row.problems.append(f"{len(judged.early)} creates retried before Retry-After")
    if judged.beside:
        row.problems.append(
            f"{len(judged.beside)} creates went through while another create of the same job "
            "was being refused 429 (two creates in flight)"
        )
    return row


# How a create the cluster refused with 429 reads in its job's DispatchRetry event: the API
# error's status after the request's own words ("creating Volcano Job gp-…: 429
# TooManyRequests: …; retrying in 2.1 s"; ``clusters.kube``).
THROTTLED = ": 429 "


@dataclass
class RetryAfterJudged:
    """What :func:`retry_after_judged` found: the refusals 429, the jobs whose next create
    came sooner than the Retry-After (with the gap, in seconds), and the jobs created while a
    create refused 429 was still in flight (no create after the refusal, one before it)."""

    refusals: int = 0
    early: dict[int, float] = field(default_factory=dict)
    beside: list[int] = field(default_factory=list)


def retry_after_judged(job_ids: Iterable[int], wait: float) -> RetryAfterJudged:
    """Judge the creates of ``job_ids`` that followed a refusal 429 with ``Retry-After: wait``.

    A refusal is a ``DispatchRetry`` whose message carries the API's status 429, not any
    "429" in it: each create's message names its Volcano Job, ``gp-`` and 32 hex digits, and
    about one name in a hundred has "429" in it. A 500 or a timeout of such a job, from any
    earlier row or scenario, retried within a second, read as a create sent before a
    Retry-After (the row's intermittent "1 creates retried before Retry-After"). Only the
    row's own jobs are read, and each refusal is measured to the job's first create after it
    (the first move to SUBMITTED, "Submitted" or "Adopted"), not to its last create."""
    from django.db.models import Q

    from portal.models import JobEvent

    events = JobEvent.objects.filter(job_id__in=list(job_ids)).filter(
        Q(reason="DispatchRetry", message__contains=THROTTLED)
        | Q(reason__in=["Submitted", "Adopted"], to_state="SUBMITTED")  # not the submit's
    )
    refusals: list[tuple[int, Any]] = []
    creates: dict[int, list[Any]] = {}
    for job_id, reason, at in events.order_by("created_at", "id").values_list(
        "job_id", "reason", "created_at"
    ):
        if reason == "DispatchRetry":
            refusals.append((job_id, at))
        else:
            creates.setdefault(job_id, []).append(at)
    judged = RetryAfterJudged(refusals=len(refusals))
    for job_id, at in refusals:
        after = [c for c in creates.get(job_id, []) if c >= at]
        if after:
            gap = (after[0] - at).total_seconds()
            if gap < wait:
                judged.early[job_id] = min(gap, judged.early.get(job_id, gap))
        elif creates.get(job_id) and job_id not in judged.beside:
            judged.beside.append(job_id)
    return judged


def _watch_faults(world: World, tier: Tier) -> Row:
    sim = world.sim
    assert sim is not None

    def arm(n: int) -> None:
        sim.faults.drop_watch_events(resource="jobs", count=n)
        sim.faults.drop_watch_events(resource="pods", count=n)
        sim.faults.expire_next_watch(resource="jobs", count=max(1, n // 10))
        sim.faults.expire_next_watch(resource="pods", count=max(1, n // 10))

    row = _faulted(world, tier, f"dropped watch events and 410s x {tier.faults_each}", arm,
                   seconds=4)  # fmt: skip
    row.notes.append("dropped events are healed by the reconcile (30 s)")
    return row


def _frozen(world: World, tier: Tier) -> Row:
    """Every request to the API server hangs for the freeze, then it answers again."""
    sim = world.sim
    assert sim is not None
    row = Row(f"API server frozen {tier.freeze_seconds:.0f} s")
    before = world.submit_many(10, clients=5, seconds=6)
    sim.faults.add(verb="*", resource="*", hang=tier.freeze_seconds, count=-1)
    frozen_at = time.monotonic()
    during = world.submit_many(10, clients=5, seconds=6)
    cycles_before = _cycles(world)
    time.sleep(max(0.0, tier.freeze_seconds - (time.monotonic() - frozen_at)))
    cycles_during = _cycles(world) - cycles_before
    sim.faults.clear()
    began = time.monotonic()
    row.faults = 1
    ids = list(before.accepted) + list(during.accepted)
    row.jobs = len(ids)
    row.notes.append(f"{cycles_during} scheduling cycles ran during the freeze")
    if cycles_during == 0:
        row.problems.append("no scheduling cycle ran while the cluster hung")
    converge(world, row, ids, since=began, timeout=tier.converge_timeout + tier.freeze_seconds)
    _deaths(world, row)
    return row


def _cycles(world: World) -> int:
    """Scheduling cycles the workers logged so far."""
    return sum(
        s.log.read_text(errors="replace").count(" cycle: ")
        for n, s in world.stack.services.items()
        if n.startswith("worker")
    )


def _restarted_empty(world: World, tier: Tier) -> Row:
    """kubesim loses its state (an API server that restarted empty): running jobs whose
    Volcano Job vanished fail VolcanoJobDeleted (docs/decisions.md), the rest carry on."""
    sim = world.sim
    assert sim is not None
    row = Row("kubesim restarted empty")
    running = world.submit_many(10, clients=5, seconds=60)
    converge(world, Row(""), running.accepted, since=time.monotonic(), timeout=60)
    sim.lose_state()
    began = time.monotonic()
    row.faults = 1
    after = world.submit_many(10, clients=5, seconds=6)
    ids = list(running.accepted) + list(after.accepted)
    row.jobs = len(ids)
    seen = converge(world, row, ids, since=began, timeout=tier.converge_timeout,
                    explained={"VolcanoJobDeleted"})  # fmt: skip
    row.notes.append(f"states: {dict(seen.states)}")
    _deaths(world, row)
    return row


NODE_FAILURE_GOAL_S = 30.0


def node_failures(world: World, tier: Tier) -> list[Row]:
    """A GPU node goes NotReady for good (no one taints it out-of-service, so its pods stay
    Terminating: the next run starts beside them), then another is cordoned and drained, under
    a running 8-GPU job while free nodes of its model wait: the seconds from the node's
    change (NotReady, or the drain's evictions) to the job Running on another node (the
    portal requeues it in its place; goal under 30 s), its submit time kept. The cordon alone
    must leave the job running: a cordon evicts nothing, and an admin cordons to let jobs
    finish."""
    return [_node_fault(world, tier, "NotReady"), _node_fault(world, tier, "drained")]


# How long the cordon alone is watched: the nodes watch acts within a second.
CORDON_WATCH_S = 3.0


def _node_fault(world: World, tier: Tier, how: str) -> Row:
    from portal.models import Job, JobEvent

    sim = world.sim
    assert sim is not None
    row = Row(f"node {how} under running 8-GPU jobs (free nodes wait)")
    team = TEAMS[0]
    submits = Submits()
    for serial in range(tier.node_faults):
        world.submit(team, serial, 70_000 + serial, submits, seconds=600, gpus=8)
    ids = list(submits.accepted)
    row.jobs = len(ids)

    def states() -> dict[str, tuple[str, list[str], Any]]:
        return {
            str(u): (s, list(p or []), t)
            for u, s, p, t in retrying(
                lambda: list(
                    Job.objects.filter(public_id__in=ids).values_list(
                        "public_id", "state", "node_plan", "submitted_at"
                    )
                )
            )
        }

    deadline = time.monotonic() + tier.converge_timeout
    while time.monotonic() < deadline and any(s != "RUNNING" for s, _, _ in states().values()):
        time.sleep(0.2)
    seconds: list[float] = []
    failed: list[str] = []
    for job_id in ids:
        state, plan, submitted_at = states()[job_id]
        if state != "RUNNING" or not plan:
            row.problems.append(f"job {job_id} never ran ({state})")
            continue
        node = plan[0]
        if how == "drained":
            sim.cordon(node)
            failed.append(node)
            time.sleep(CORDON_WATCH_S)
            state, now_plan, _ = states()[job_id]
            if state != "RUNNING" or now_plan != plan:
                row.problems.append(
                    f"job {job_id} {state} on {now_plan} after a cordon alone of {node}"
                )
                continue
        began = time.monotonic()
        if how == "NotReady":
            sim.node_not_ready(node)  # its pods stay Terminating: no kubelet confirms their end
            failed.append(node)
        else:
            sim.drain(node)
        row.faults += 1
        moved = False
        while time.monotonic() - began < tier.converge_timeout:
            state, now_plan, now_submitted = states()[job_id]
            if state == "RUNNING" and now_plan and node not in now_plan:
                moved = True
                break
            time.sleep(0.1)
        if not moved:
            row.problems.append(f"job {job_id} still {state} on {now_plan} after {how} {node}")
            continue
        seconds.append(time.monotonic() - began)
        if now_submitted != submitted_at:
            row.problems.append(f"job {job_id} lost its submit time")
        reasons = retrying(
            lambda job_id=job_id: list(
                JobEvent.objects.filter(job__public_id=job_id, to_state="PREEMPTING")
                .exclude(from_state="PREEMPTING")
                .values_list("reason", flat=True)
            )
        )
        if reasons != ["NodeFailure"]:
            row.problems.append(f"job {job_id} stopped for {reasons}, not once for NodeFailure")
    if seconds:
        row.converge_s = max(seconds)
        figures = ", ".join(f"{s:.1f}" for s in seconds)
        met = "met" if max(seconds) < NODE_FAILURE_GOAL_S else "MISSED"
        row.notes.append(
            f"{how} to Running elsewhere: {figures} s (goal < {NODE_FAILURE_GOAL_S:.0f} s: {met})"
        )
    # The operator mends the nodes; the jobs are cancelled so the next scenario has the pool.
    for node in failed:
        (sim.node_ready if how == "NotReady" else sim.uncordon)(node)
    for serial, job_id in enumerate(ids):
        token = world.tokens[team][serial % len(world.tokens[team])]
        world.request("POST", f"/api/v1/jobs/{job_id}/cancel/", token, {})
    converge(world, Row(""), ids, since=time.monotonic(), timeout=tier.converge_timeout)
    _deaths(world, row)
    return row


class RunningPeak:
    """The most pods of one team seen running at once, sampled every 0.2 s from ``start`` to
    ``stop`` (what a quota must bound, read from the cluster)."""

    def __init__(self, world: World, team: str) -> None:
        self.world, self.team, self.peak = world, team, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample)

    def _sample(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                self.peak = max(self.peak, self.world.running_pods(self.team))
            time.sleep(0.2)

    def start(self) -> RunningPeak:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def quota_race(world: World, tier: Tier) -> Row:
    """N concurrent 1-GPU submits to a team with 8 GPUs and no borrowing."""
    row = Row(f"quota race: {tier.race_jobs} submits, {RACE_GPUS}-GPU team")
    sampler = RunningPeak(world, RACE_TEAM).start()
    began = time.monotonic()
    submits = world.submit_many(tier.race_jobs, clients=tier.race_jobs, teams=[RACE_TEAM],
                                seconds=3)  # fmt: skip
    row.jobs = len(submits.accepted)
    _judge_answers(row, submits)
    row.lost += missing_rows(world, submits)

    def all_done() -> bool:
        from portal.models import Job

        states = retrying(
            lambda: set(
                Job.objects.filter(public_id__in=list(submits.accepted)).values_list(
                    "state", flat=True)
            )
        )  # fmt: skip
        return states <= {"SUCCEEDED"}

    converge(world, row, submits.accepted, since=began, timeout=tier.converge_timeout * 2,
             also=all_done, allow_queued=True)  # fmt: skip
    peak = sampler.stop()
    row.notes.append(f"at most {peak} running at once")
    if peak > RACE_GPUS:
        row.problems.append(f"{peak} jobs ran at once on an {RACE_GPUS}-GPU quota")
    _deaths(world, row)
    return row


__all__ = [
    "FULL",
    "SHORT",
    "Row",
    "RunningPeak",
    "Tier",
    "cluster_faults",
    "node_failures",
    "postgres_restart",
    "quota_race",
    "redis_restart",
    "submits_from_many_clients",
    "watcher_kills",
    "worker_kills",
]
