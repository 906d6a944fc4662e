"""Faults of the processes and services around the portal, each a soak scenario with its row.

- **web killed mid-burst**: gunicorn gets SIGKILL while clients submit, and is started again as
  a supervisor does; every client sends a request that got no answer (or a 503) again under the
  same ``Idempotency-Key`` until it is answered. No key may end with two jobs, no answer 201 may
  name a job that does not exist.
- **two schedulers at once**: two extra processes loop ``run_cycle()`` from the same moment
  (besides the workers' own cycles) while a burst of 1-GPU jobs meets the 8-GPU race team: no
  more than 8 may run at once and no job may be admitted twice in one attempt.
- **PostgreSQL at its connection limit**: this process takes every connection the server
  allows and holds them while clients submit: what is not a 201 must be a JSON 503 with
  ``Retry-After``, and once the connections go every accepted job converges.
- **one slow cluster**: a second kubesim (H100s) answers every call 2 s late, under the
  client's timeout, while the A100 cluster keeps flowing: the A100 jobs' submit-to-SUBMITTED
  latency stays near a baseline measured first in the same scenario.

The module is also the extra scheduler process of the second scenario:
``python -m tests.soak.stack_faults cycles --start-at EPOCH --seconds S`` (with the stack's
environment) loops cycles and prints what it did as one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, cast

from tests.soak.harness import (
    KUBESIM_CONFIG,
    LABEL_JOB_ID,
    RACE_GPUS,
    RACE_TEAM,
    TEAMS,
    Answer,
    Submits,
    World,
    job_body,
    retrying,
)
from tests.soak.scenarios import (
    Row,
    RunningPeak,
    Tier,
    _deaths,
    _judge_answers,
    converge,
    missing_rows,
)
from tests.soak.stack import HOST, ROOT


@dataclass(frozen=True)
class Sizes:
    """How big each experiment is in a tier (the scenarios' own counts, beside ``Tier``)."""

    web_kills: int
    web_clients: int
    web_burst_seconds: float
    cycle_seconds: float
    limit_hold_seconds: float
    limit_clients: int
    slow_jobs: int  # per cluster, in the baseline and in the burst


SIZES = {
    "short": Sizes(web_kills=1, web_clients=8, web_burst_seconds=10, cycle_seconds=8,
                   limit_hold_seconds=6, limit_clients=4, slow_jobs=12),
    "full": Sizes(web_kills=3, web_clients=12, web_burst_seconds=30, cycle_seconds=25,
                  limit_hold_seconds=20, limit_clients=10, slow_jobs=50),
}  # fmt: skip

GIVE_UP_SECONDS = 30.0  # a client retries one request (same key) this long, then gives up


# ---------------------------------------------------------------------------------------------
# Clients that retry under their key
# ---------------------------------------------------------------------------------------------
@dataclass
class Keyed:
    """What careful clients saw: every answer (for the 5xx and JSON checks), the job ids each
    key was answered with (two ids for one key is a doubled job), and the keys given up."""

    answers: Submits = field(default_factory=Submits)
    ids_by_key: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    given_up: list[str] = field(default_factory=list)
    retries: int = 0
    refusal: str = ""  # the first 4xx body, to say why
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def keys(self) -> list[str]:
        return list(self.ids_by_key) + self.given_up

    @property
    def job_ids(self) -> list[str]:
        return sorted({i for ids in self.ids_by_key.values() for i in ids})

    @property
    def doubled_keys(self) -> list[str]:
        return [k for k, ids in self.ids_by_key.items() if len(ids) > 1]


def submit_until_answered(
    world: World, token: str, body: dict[str, Any], into: Keyed, *, key: str | None = None
) -> Answer | None:
    """One submit that a client cares about: sent again under the same key while it gets no
    answer (a reset, a refused connection) or a 503 (after its ``Retry-After``, at most 2 s
    here so a 30 s budget sees several tries), for up to ``GIVE_UP_SECONDS``."""
    key = key or f"soak-{uuid.uuid4()}"
    deadline = time.monotonic() + GIVE_UP_SECONDS
    while True:
        answer = world.request(
            "POST", "/api/v1/jobs/", token, body, timeout=15, Idempotency_Key=key
        )
        if answer is not None:
            into.answers.record(answer, key)
        if answer is not None and answer.status != 503:
            with into.lock:
                if answer.status in (200, 201):
                    into.ids_by_key[key].add(answer.json()["id"])
                elif 400 <= answer.status < 500 and not into.refusal:
                    into.refusal = answer.body[:300].decode(errors="replace")
            return answer
        if time.monotonic() > deadline:
            with into.lock:
                into.given_up.append(key)
            return None
        with into.lock:
            into.retries += 1
        wait = 0.5
        if answer is not None:
            with contextlib.suppress(ValueError):
                wait = min(2.0, float(answer.headers.get("retry-after", "0.5")))
        time.sleep(wait)


def clients_for(
    world: World,
    for_seconds: float,
    clients: int,
    *,
    teams: tuple[str, ...] = TEAMS,
    pause: float = 0.1,
    **body: Any,
) -> tuple[Keyed, threading.Thread]:
    """``clients`` clients submitting one job after another for ``for_seconds`` (from now),
    each under a new key, each retried until answered; join the thread for the figures."""
    out = Keyed()
    stop_at = time.monotonic() + for_seconds
    serials = iter(range(70_000, 10_000_000))
    lock = threading.Lock()

    def client(index: int) -> None:
        team = teams[index % len(teams)]
        token = world.tokens[team][(index // len(teams)) % len(world.tokens[team])]
        while time.monotonic() < stop_at:
            with lock:
                serial = next(serials)
            submit_until_answered(world, token, job_body(team, serial, **body), out)
            time.sleep(pause)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()

    def join_all() -> None:
        for thread in threads:
            thread.join()

    joiner = threading.Thread(target=join_all)
    joiner.start()
    return out, joiner


def _judge_keys(world: World, row: Row, seen: Keyed) -> list[str]:
    """Fill the row's client-side figures; return every job id the keys stand for (the jobs
    of keys whose every answer was lost included: the portal may have made them)."""
    from portal.models import Job

    _judge_answers(row, seen.answers)
    row.notes.append(f"{seen.retries} retries under the same key")
    refused = sum(n for code, n in seen.answers.statuses.items() if 400 <= code < 500)
    if refused:  # every request here is valid and its key new or retried with the same body
        row.problems.append(f"{refused} answers 4xx, e.g. {seen.refusal}")
    row.lost += missing_rows(world, seen.answers)
    doubled = seen.doubled_keys
    stored = retrying(
        lambda: list(
            Job.objects.filter(idempotency_key__in=seen.keys).values_list(
                "idempotency_key", "public_id"
            )
        )
    )
    per_key = Counter(k for k, _ in stored)
    doubled += [k for k, n in per_key.items() if n > 1 and k not in doubled]
    if doubled:
        row.duplicated += len(doubled)
        row.problems.append(f"{len(doubled)} keys with two jobs: {doubled[:3]}")
    if seen.given_up:
        row.problems.append(f"{len(seen.given_up)} submits unanswered after {GIVE_UP_SECONDS} s")
    return sorted({str(public_id) for _, public_id in stored} | set(seen.job_ids))


# ---------------------------------------------------------------------------------------------
# 1. The web process killed mid-burst
# ---------------------------------------------------------------------------------------------
def web_kills(world: World, tier: Tier) -> Row:
    """kill -9 of gunicorn (master and workers) during a burst of keyed submits, started again
    one second later as a supervisor would. The submits in flight at the kill lose their
    answers; their clients cannot know whether the job was made, so they send the same key
    again, and the portal must answer with the one job it made (or make it now), never two."""
    sizes = SIZES[tier.name]
    row = Row(f"kill -9 of the web process mid-burst x {sizes.web_kills}")
    web = world.stack.services["web"]
    seen, joiner = clients_for(world, sizes.web_burst_seconds, sizes.web_clients, seconds=6)
    began = time.monotonic()
    restarted = began
    back: list[float] = []
    for i in range(sizes.web_kills):
        at = began + sizes.web_burst_seconds * (i + 1) / (sizes.web_kills + 1)
        time.sleep(max(0.0, at - time.monotonic()))
        killed = time.monotonic()
        web.kill()
        row.faults += 1
        time.sleep(1.0)  # the supervisor notices and starts it again
        web.start(world.stack.env())
        restarted = time.monotonic()
        world.wait_serving()
        back.append(time.monotonic() - killed)
    joiner.join()
    ids = _judge_keys(world, row, seen)
    row.jobs = len(ids)
    row.notes.append("serving again " + ", ".join(f"{s:.1f} s" for s in back) + " after a kill")
    converge(world, row, ids, since=restarted, timeout=tier.converge_timeout)
    row.notes.append("converge: from the last restart (the burst goes on meanwhile)")
    _deaths(world, row)
    return row


# ---------------------------------------------------------------------------------------------
# 2. Two schedulers at once
# ---------------------------------------------------------------------------------------------
def _cycle_loop(start_at: float, seconds: float) -> dict[str, Any]:
    """The body of one extra scheduler process: wait for the common start, then run cycles
    back to back. Only the scheduler lock may keep two cycles apart here."""
    import django

    django.setup()
    from scheduling.cycle import run_cycle

    ran = skipped = 0
    admitted: list[int] = []
    errors: Counter[str] = Counter()
    time.sleep(max(0.0, start_at - time.time()))
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        try:
            result = run_cycle()
        except Exception as exc:  # counted, not hidden: a cycle that raises is a finding
            errors[type(exc).__name__] += 1
            time.sleep(0.1)
            continue
        if result.ran:
            ran += 1
            admitted += result.admitted
        else:
            skipped += 1
        time.sleep(0.02)  # two cores are shared: leave the workers some of them
    return {"ran": ran, "skipped": skipped, "admitted": admitted, "errors": dict(errors)}


def _double_admissions(job_pks: list[int]) -> dict[int, int]:
    """Jobs admitted more often than they were sent back to the queue plus one: two
    admissions of one attempt. Job pk -> admissions."""
    from portal.models import JobEvent

    events = retrying(
        lambda: list(
            JobEvent.objects.filter(job_id__in=job_pks)
            .exclude(from_state="")
            .values_list("job_id", "from_state", "to_state")
        )
    )
    admissions: Counter[int] = Counter()
    requeues: Counter[int] = Counter()
    for pk, before, after in events:
        if after == "ADMITTED" and before != "ADMITTED":
            admissions[pk] += 1
        elif after == "QUEUED" and before != "QUEUED":
            requeues[pk] += 1
    return {pk: n for pk, n in admissions.items() if n > requeues[pk] + 1}


def _spawn(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """One extra scheduler process, its output kept for the row."""
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        text=True,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def two_schedulers(world: World, tier: Tier) -> Row:
    """Two scheduler processes started at the same moment, looping cycles, while the race
    team's burst arrives (the workers run their own cycles too): the advisory lock must keep
    the cycles one at a time, so the team never runs more than its 8 GPUs and no job is
    admitted twice."""
    from portal.models import Job

    sizes = SIZES[tier.name]
    row = Row(f"two schedulers at once, {tier.race_jobs} submits, {RACE_GPUS}-GPU team")
    start_at = time.time() + 6.0  # both processes are set up by then (Django's import)
    cmd = [sys.executable, "-m", "tests.soak.stack_faults", "cycles", "--start-at",
           str(start_at), "--seconds", str(sizes.cycle_seconds)]  # fmt: skip
    procs = [_spawn(cmd, world.stack.env()) for _ in range(2)]
    row.faults = len(procs)
    sampler = RunningPeak(world, RACE_TEAM).start()
    time.sleep(max(0.0, start_at - time.time()))
    began = time.monotonic()
    submits = world.submit_many(tier.race_jobs, clients=tier.race_jobs, teams=[RACE_TEAM],
                                seconds=3)  # fmt: skip
    row.jobs = len(submits.accepted)
    _judge_answers(row, submits)
    row.lost += missing_rows(world, submits)
    loops: list[dict[str, Any]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=sizes.cycle_seconds + 60)
        lines = out.strip().splitlines()
        if proc.returncode != 0 or not lines:
            row.problems.append(f"a scheduler process ended {proc.returncode}: {err[-300:]}")
            continue
        loops.append(json.loads(lines[-1]))
    ids = list(submits.accepted)

    def all_done() -> bool:
        states = retrying(
            lambda: set(Job.objects.filter(public_id__in=ids).values_list("state", flat=True))
        )
        return bool(states <= {"SUCCEEDED"})

    converge(world, row, ids, since=began, timeout=tier.converge_timeout * 2, also=all_done,
             allow_queued=True)  # fmt: skip
    peak = sampler.stop()
    pks = retrying(lambda: list(Job.objects.filter(public_id__in=ids).values_list("pk", flat=True)))
    doubled = _double_admissions(pks)
    both = set(loops[0]["admitted"]) & set(loops[1]["admitted"]) if len(loops) == 2 else set()
    row.notes.append(
        "extra schedulers: "
        + ", ".join(f"{lp['ran']} cycles ran, {lp['skipped']} found the lock taken" for lp in loops)
    )
    row.notes.append(f"at most {peak} running at once; {len(doubled)} jobs admitted twice")
    if peak > RACE_GPUS:
        row.problems.append(f"{peak} jobs ran at once on an {RACE_GPUS}-GPU quota")
    if doubled:
        row.duplicated += len(doubled)
        row.problems.append(f"admitted twice in one attempt: {sorted(doubled.items())[:3]}")
    if both:
        row.notes.append(f"{len(both)} jobs admitted by both extra processes (requeued between)")
    if any(lp["errors"] for lp in loops):
        row.problems.append(f"cycles raised: {[lp['errors'] for lp in loops]}")
    if not all(lp["ran"] for lp in loops):
        row.problems.append("an extra scheduler never ran a cycle: the race was not run")
    _deaths(world, row)
    return row


# ---------------------------------------------------------------------------------------------
# 3. PostgreSQL at its connection limit
# ---------------------------------------------------------------------------------------------
def _connect(url: str) -> Any | None:
    """A connection, or None when the server refuses one more."""
    import psycopg

    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError:
        return None


def _take_slots(url: str, held: list[Any], *, seconds: float, pause: float) -> None:
    """For ``seconds``, take every connection slot that comes free (a refusal waits
    ``pause``): the server stays at its limit while others let sessions go."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if (conn := _connect(url)) is not None:
            held.append(conn)
        else:
            time.sleep(pause)


def postgres_limit(world: World, tier: Tier) -> Row:
    """Every connection PostgreSQL allows taken by this process, held while clients submit.

    The portal's processes connect as the superuser here, so the superuser-reserved slots
    are theirs too and count as taken only when this process holds them: it opens connections
    until the server refuses one. Processes holding a session keep it (``CONN_MAX_AGE``), so
    their sessions are ended once the server is full (``pg_terminate_backend``, as a pooler
    or a failover would) and the freed slots taken again: every process then meets the limit
    the next time it needs the database."""
    from django.db import connections

    sizes = SIZES[tier.name]
    row = Row(f"PostgreSQL at its connection limit for {sizes.limit_hold_seconds:.0f} s")
    url = f"postgres://postgres@{HOST}:{world.stack.postgres.port}/gpupool"
    queued = world.submit_many(10, clients=5, seconds=6)  # work in flight when the limit hits
    connections.close_all()
    held: list[Any] = []
    try:
        first = _connect(url)
        assert first is not None, "PostgreSQL refused the first connection"
        held.append(first)
        limits = dict(
            first.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('max_connections', 'superuser_reserved_connections', 'reserved_connections')"
            ).fetchall()
        )
        while (conn := _connect(url)) is not None:
            held.append(conn)
        mine = [c.info.backend_pid for c in held]
        cut = first.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND NOT pid = ANY(%s)",
            [mine],
        ).fetchone()[0]
        # The cut sessions' slots, taken before any client comes: gunicorn's threads reconnect
        # only for a request, so they find the server full (the workers may win a few).
        _take_slots(url, held, seconds=1.5, pause=0.02)
        seen, joiner = clients_for(world, sizes.limit_hold_seconds, sizes.limit_clients,
                                   seconds=6)  # fmt: skip
        row.faults = 1
        _take_slots(url, held, seconds=sizes.limit_hold_seconds, pause=0.2)
        theirs = first.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND NOT pid = ANY(%s)",
            [[c.info.backend_pid for c in held]],
        ).fetchone()[0]
        during = dict(seen.answers.statuses)
    finally:
        for conn in held:
            with contextlib.suppress(Exception):
                conn.close()
    began = time.monotonic()
    joiner.join()
    ids = _judge_keys(world, row, seen) + list(queued.accepted)
    row.jobs = len(ids)
    row.lost += missing_rows(world, queued)
    row.notes.append(
        f"held {len(held)} connections (max_connections {limits.get('max_connections')}, "
        f"{limits.get('superuser_reserved_connections')} reserved for superusers), "
        f"{cut} portal sessions cut, {theirs} regained; answers during the limit: "
        + " ".join(f"{code}×{n}" for code, n in sorted(during.items()))
    )
    if not during.get(503):
        row.notes.append("no request met the limit (every one found a session)")
    converge(world, row, ids, since=began, timeout=tier.converge_timeout)
    row.notes.append("converge: from the connections' release")
    _deaths(world, row)
    return row


# ---------------------------------------------------------------------------------------------
# 4. One slow cluster while another keeps flowing
# ---------------------------------------------------------------------------------------------
SLOW_MODEL = "h100-sxm"
FAST_MODEL = "a100-80gb"
SLOW_DELAY = 2.0  # under GPUPOOL_CLUSTER_TIMEOUT_SECONDS (4 in the soak): slow, never failed
SLOW_CONFIG: dict[str, Any] = {
    **KUBESIM_CONFIG,
    "name": "soak-slow",
    "nodePools": [
        {"name": "h100", "count": 8, "gpuModel": SLOW_MODEL, "gpus": 8, "cpu": 224,
         "memory": "2Ti"},
    ],
}  # fmt: skip


class BothClusters:
    """The truth of a two-cluster pool: the Volcano Jobs of both clusters, by portal job id
    (a job with one on each cluster is a twin). Stands in for ``World`` in ``converge``, which
    reads nothing else of it."""

    def __init__(self, world: World, other: Any) -> None:
        import yaml
        from kubernetes import client, config

        self.world = world
        raw = other.kubeconfig_dict(namespace="gpupool")
        raw.pop("preferences", None)
        api = config.new_client_from_config_dict(yaml.safe_load(yaml.safe_dump(raw)))
        self.custom = client.CustomObjectsApi(api)

    def volcano_jobs(self) -> dict[str, list[dict[str, Any]]]:
        out = self.world.volcano_jobs()
        items = self.custom.list_cluster_custom_object(
            "batch.volcano.sh", "v1alpha1", "jobs", label_selector=LABEL_JOB_ID,
            _request_timeout=30,
        )["items"]  # fmt: skip
        for item in items:
            if item["metadata"].get("deletionTimestamp") is None:
                job_id = item["metadata"]["labels"][LABEL_JOB_ID]
                out.setdefault(job_id, []).append(item)
        return out


def _add_slow_cluster(world: World, sim: Any) -> int:
    """Register the second cluster as an operator does, and give every team a quota on it."""
    import yaml

    from clusters.inventory import inventory_sync
    from clusters.queues import queues_sync
    from clusters.registration import cluster_credentials_from_input, cluster_register
    from portal.models import Team
    from scheduling.models import GpuModel, Quota

    raw = sim.kubeconfig_dict(namespace="gpupool")
    raw.pop("preferences", None)
    credentials = cluster_credentials_from_input(kubeconfig=yaml.safe_dump(raw))
    cluster, _ = cluster_register(
        name="soak-slow", credentials=credentials, namespace="gpupool", request_rate=200,
        creates_in_flight=16,
    )  # fmt: skip
    assert inventory_sync(cluster=cluster).ok
    assert queues_sync(cluster=cluster).ok
    model = GpuModel.objects.get(key=SLOW_MODEL)
    for team in Team.objects.filter(slug__in=TEAMS):
        Quota.objects.update_or_create(team=team, gpu_model=model, defaults={"nominal": 12})
    return int(cluster.pk)


def _submit_latencies(ids: list[str]) -> list[float]:
    """Seconds from each job's submit to its first SUBMITTED (its Volcano Job created)."""
    from portal.models import Job, JobEvent

    submitted = dict(
        retrying(
            lambda: list(Job.objects.filter(public_id__in=ids).values_list("pk", "submitted_at"))
        )
    )
    first: dict[int, Any] = {}
    for pk, at in retrying(
        lambda: list(
            JobEvent.objects.filter(job_id__in=list(submitted), to_state="SUBMITTED")
            .exclude(from_state="SUBMITTED")
            .values_list("job_id", "created_at")
        )
    ):
        first[pk] = min(first.get(pk, at), at)
    return sorted((at - submitted[pk]).total_seconds() for pk, at in first.items())


def _pct(values: list[float], p: float) -> float:
    """The nearest-rank percentile (the worst of 20 for p99 of 20)."""
    if not values:
        return math.nan
    return values[min(len(values) - 1, max(0, math.ceil(p * len(values)) - 1))]


def _keyed_burst(world: World, count: int, model: str, into: Keyed) -> None:
    """``count`` submits from five clients (one per team), pinned to ``model``."""
    serials = iter(range(count))
    lock = threading.Lock()

    def client(index: int) -> None:
        team = TEAMS[index % len(TEAMS)]
        token = world.tokens[team][index % len(world.tokens[team])]
        while True:
            with lock:
                serial = next(serials, None)
            if serial is None:
                return
            body = job_body(team, 80_000 + serial, seconds=8)
            del body["min_gpu_memory_gib"]  # a list of models or constraints, not both
            body["gpu_models"] = [model]
            submit_until_answered(world, token, body, into)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(TEAMS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _merge(row: Row, part: Row, label: str) -> None:
    """Count a part's lost, doubled and stuck jobs and its problems in the row."""
    row.lost += part.lost
    row.duplicated += part.duplicated
    row.stuck += part.stuck
    row.problems += [f"{label}: {p}" for p in part.problems]


def slow_cluster(world: World, tier: Tier) -> Row:
    """A second cluster whose every API call takes 2 s longer (the client still gets its
    answer), jobs submitted to both at once: the slow one may hold its own jobs back, not the
    fast one's. The fast cluster's submit-to-SUBMITTED latency is measured alone first, then
    beside the slow one; all jobs of both must converge while the slow one is still slow."""
    from clusters.models import Cluster, ClusterState
    from clusters.registration import cluster_state_set
    from kubesim import KubeSim

    sizes = SIZES[tier.name]
    n = sizes.slow_jobs
    row = Row(f"one cluster +{SLOW_DELAY:.0f} s a call, another flowing, {n}+{n} jobs")
    sim = KubeSim(SLOW_CONFIG, clock_speed=1.0)
    sim.start()
    cluster_pk = 0
    try:
        cluster_pk = _add_slow_cluster(world, sim)
        truth = cast(World, BothClusters(world, sim))
        alone = Keyed()
        _keyed_burst(world, n, FAST_MODEL, alone)
        baseline = Row("")
        base_ids = _judge_keys(world, baseline, alone)
        converge(truth, baseline, base_ids, since=time.monotonic(), timeout=60)
        _merge(row, baseline, "baseline")
        base = _submit_latencies(base_ids)

        sim.faults.add(verb="*", resource="*", hang=SLOW_DELAY, count=-1)
        fast, slow = Keyed(), Keyed()
        bursts = [
            threading.Thread(target=_keyed_burst, args=(world, n, FAST_MODEL, fast)),
            threading.Thread(target=_keyed_burst, args=(world, n, SLOW_MODEL, slow)),
        ]
        for burst in bursts:
            burst.start()
        for burst in bursts:
            burst.join()
        began = time.monotonic()
        fast_ids = _judge_keys(world, row, fast)
        slow_row = Row("")
        slow_ids = _judge_keys(world, slow_row, slow)
        _merge(row, slow_row, "slow cluster")
        row.notes.insert(1, f"slow cluster's {slow_row.notes[0]}")
        row.jobs = len(fast_ids) + len(slow_ids)
        converge(truth, row, fast_ids + slow_ids, since=began, timeout=tier.converge_timeout)
        row.faults = len(sim.faults.records())
        during, slowed = _submit_latencies(fast_ids), _submit_latencies(slow_ids)
        row.notes.append(
            f"fast cluster submit→SUBMITTED p50/p99: alone {_pct(base, 0.5):.1f}/"
            f"{_pct(base, 0.99):.1f} s, beside the slow one {_pct(during, 0.5):.1f}/"
            f"{_pct(during, 0.99):.1f} s; slow cluster {_pct(slowed, 0.5):.1f}/"
            f"{_pct(slowed, 0.99):.1f} s"
        )
        row.notes.append("converge: from the burst's last answer, the slow cluster still slow")
        bound = 3 * _pct(base, 0.99) + 2.0
        if len(during) < len(fast_ids):
            row.problems.append(f"{len(fast_ids) - len(during)} fast-cluster jobs never SUBMITTED")
        if during and _pct(during, 0.99) > bound:
            row.problems.append(
                f"the fast cluster's p99 {_pct(during, 0.99):.1f} s is over 3 × its baseline "
                f"+ 2 s ({bound:.1f} s)"
            )
        # Let the slow cluster's jobs finish before it goes, so no later row sees them.
        sim.faults.clear()
        deadline = time.monotonic() + 60
        from portal.models import Job

        while time.monotonic() < deadline and retrying(
            lambda: (
                Job.objects.filter(public_id__in=slow_ids)
                .exclude(state__in=["SUCCEEDED", "FAILED", "CANCELLED"])
                .exists()
            )
        ):
            time.sleep(1.0)
    finally:
        sim.faults.clear()
        if cluster_pk:
            cluster_state_set(cluster=Cluster.objects.get(pk=cluster_pk),
                              state=ClusterState.DISABLED)  # fmt: skip
            time.sleep(3.0)  # the watcher's refresh (2 s) lets the disabled cluster go
        sim.stop()
    _deaths(world, row)
    return row


# ---------------------------------------------------------------------------------------------
# The extra scheduler process
# ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="An extra scheduler process of the soak.")
    sub = parser.add_subparsers(dest="command", required=True)
    cycles = sub.add_parser("cycles", help="loop run_cycle() from a common start")
    cycles.add_argument("--start-at", type=float, required=True, help="epoch seconds")
    cycles.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    print(json.dumps(_cycle_loop(args.start_at, args.seconds)), flush=True)
    return 0


__all__ = ["SIZES", "postgres_limit", "slow_cluster", "two_schedulers", "web_kills"]

if __name__ == "__main__":
    sys.exit(main())
