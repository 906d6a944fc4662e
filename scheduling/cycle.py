"""One scheduling cycle: the I/O around the pure engine, as numbered steps.

    1. take the scheduler lock (single flight across processes)
    2. load a snapshot in a handful of queries (no per-job queries)
    3. engine.decide(snapshot)
    4. persist admissions, preemptions and pending reasons in bulk, in one transaction
    5. on commit, enqueue dispatch (admitted) and eviction (preempted) tasks

Everything written is guarded: admissions and preemptions are compare-and-set transitions, so a
cycle racing a cancel, or a second cycle (which the lock prevents anyway), changes nothing twice.
A crash before step 4 commits leaves every job as it was.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import functools
import gc
import json
import logging
import math
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import connection, transaction
from django.db.models import BigIntegerField, Count, F, Func, Sum, TextField, Window
from django.db.models.functions import Cast, RowNumber, TruncDay
from django.utils import timezone

from clusters.capacity import NodeLoad, OverCount, planned_gpus_by_node, pool_free
from clusters.models import Cluster, Node
from dashboards.metrics import observe_cycle
from portal.jobs.state import Change, job_transition, jobs_transition_bulk
from portal.models import Job, JobState, Team
from scheduling import engine
from scheduling.models import (
    DEFAULT_COHORT_SLUG,
    CohortQuota,
    GpuModel,
    Quota,
    TeamPolicy,
    UsageRecord,
)

log = logging.getLogger(__name__)

# Postgres advisory lock key: "gpupool cycle" (stable across deploys; see docs/decisions.md).
CYCLE_LOCK_KEY = 0x67707031  # "gpp1"

HOLDING_STATES = (
    JobState.ADMITTED,
    JobState.SUBMITTED,
    JobState.RUNNING,
    JobState.PREEMPTING,
    JobState.CANCELLING,
)
PREEMPTIBLE_STATES = (JobState.ADMITTED, JobState.SUBMITTED, JobState.RUNNING)

# Called on commit with the ids of admitted / preempted jobs (the clusters app registers its
# dispatch and eviction tasks here; without them admissions wait in ADMITTED).
on_admitted: list[Callable[[list[int]], None]] = []
on_preempted: list[Callable[[list[int]], None]] = []
# Called with the ids of clusters whose books over-count a node, so that their pods' real
# bindings are read again (the clusters app registers its bindings refresh here).
on_over_count: list[Callable[[list[int]], None]] = []


@dataclass
class CycleResult:
    ran: bool
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    pending: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)


def engine_config() -> engine.EngineConfig:
    return engine.EngineConfig(
        lookback_per_team=settings.GPUPOOL_SCHEDULER_LOOKBACK,
        starvation_wait=dt.timedelta(minutes=settings.GPUPOOL_STARVATION_WAIT_MINUTES),
        usage_half_life=dt.timedelta(hours=settings.GPUPOOL_USAGE_HALF_LIFE_HOURS),
        preemption=settings.GPUPOOL_PREEMPTION,
    )


# ---------------------------------------------------------------------------------------------
# 1. The lock
# ---------------------------------------------------------------------------------------------
@contextmanager
def scheduler_lock() -> Iterator[bool]:
    """Yield True if this process holds the scheduler lock, False if another one does.

    PostgreSQL: a session advisory lock (released on unlock or when the connection dies, so a
    killed worker cannot wedge the scheduler). SQLite (the demo): an exclusive ``flock`` on a
    file next to the database, which holds across processes the same way.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [CYCLE_LOCK_KEY])
            got = bool(cur.fetchone()[0])
        try:
            yield got
        finally:
            if got:
                _release_advisory_lock()
        return
    path = Path(settings.VAR_DIR) / "scheduler.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _release_advisory_lock() -> None:
    """Unlock, or drop the connection (and with it the lock) when unlocking fails: workers keep
    their connections between tasks, so a lock left on one would stop every other cycle."""
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", [CYCLE_LOCK_KEY])
            released = bool(cur.fetchone()[0])
    except Exception:
        released = False
    if not released:
        log.warning("could not release the scheduler lock; closing the connection instead")
        connection.close()


# ---------------------------------------------------------------------------------------------
# 2. The snapshot
# ---------------------------------------------------------------------------------------------
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class EpochMicroseconds(Func):
    """A timestamp as whole microseconds since 1970 UTC, exact on both databases.

    The cycle reads a timestamp or two for every queued and running job. Django's
    timezone-aware loader is a Python call per value on PostgreSQL (it subclasses psycopg's
    Python loader); an integer costs next to nothing and becomes a datetime in ``from_epoch_us``.
    For a column reference only: the SQLite form repeats its expression.
    """

    output_field = BigIntegerField()
    template = "(EXTRACT(EPOCH FROM %(expressions)s) * 1000000)::bigint"

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        # Django stores 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC: whole seconds from strftime on
        # the first 19 characters (given the fraction it would round .9999995 up), the six
        # fraction digits (or none) from the text. '%%%%s' reaches SQLite as '%s'.
        template = (
            "(CAST(strftime('%%%%s', substr(%(expressions)s, 1, 19)) AS INTEGER) * 1000000"
            " + CAST(substr(%(expressions)s || '.000000', 21, 6) AS INTEGER))"
        )
        return self.as_sql(compiler, connection, template=template, **extra)


def from_epoch_us(value: int | None) -> dt.datetime | None:
    return None if value is None else _EPOCH + dt.timedelta(microseconds=value)


def _as_text(field_name: str) -> Cast:
    """A column read as text: JSON for ``json_tuple`` (most jobs share a handful of values),
    a UUID for ``uuid_text`` (canonical on PostgreSQL, sparing a UUID object a row)."""
    return Cast(field_name, output_field=TextField())


@functools.lru_cache(maxsize=4096)
def json_tuple(text: str | None) -> tuple[Any, ...]:
    """A JSON list column as a tuple, parsed once per distinct text (``[]``, a model list…)."""
    return tuple(json.loads(text)) if text else ()


@dataclass
class Loaded:
    """The snapshot plus what persisting needs to map engine ids back to rows."""

    snapshot: engine.Snapshot
    job_pk: dict[str, int]
    model_pk: dict[str, int]
    cluster_pk: dict[str, int]
    previous: dict[int, tuple[str, str, int | None]]  # pk → (code, message, position)


def engine_catalog() -> tuple[tuple[engine.GpuModel, ...], dict[str, int]]:
    rows = list(GpuModel.objects.filter(active=True).order_by("cost_factor", "key"))
    models = tuple(
        engine.GpuModel(
            key=m.key,
            name=m.key,
            cost_factor=m.cost_factor,
            tflops_fp16=m.fp16_tflops,
            memory_gib=float(m.memory_gib),
            bf16=m.bf16,
            fp8=m.fp8,
        )
        for m in rows
    )
    return models, {m.key: m.pk for m in rows}


def _teams() -> tuple[engine.Team, ...]:
    policies = {p.team_id: p for p in TeamPolicy.objects.select_related("cohort").all()}
    teams = []
    for team_id, slug in Team.objects.values_list("id", "slug"):
        policy = policies.get(team_id)
        teams.append(
            engine.Team(
                id=slug,
                weight=policy.weight if policy else 1.0,
                cohort=(policy.cohort.slug if policy and policy.cohort else DEFAULT_COHORT_SLUG),
                held=bool(policy and policy.held),
            )
        )
    return tuple(teams)


def _quotas() -> tuple[engine.Quota, ...]:
    return tuple(
        engine.Quota(
            team=team,
            model=model,
            nominal=nominal,
            borrowing_limit=borrow,
            lending_limit=lend,
        )
        for team, model, nominal, borrow, lend in Quota.objects.filter(
            gpu_model__active=True
        ).values_list("team__slug", "gpu_model__key", "nominal", "borrowing_limit", "lending_limit")
    )


def _cohort_quotas() -> tuple[engine.CohortQuota, ...]:
    """GPUs owned by cohorts (the ``default`` cohort's are the pool's), lendable to members."""
    return tuple(
        engine.CohortQuota(cohort=cohort, model=model, nominal=nominal)
        for cohort, model, nominal in CohortQuota.objects.filter(
            gpu_model__active=True, nominal__gt=0
        ).values_list("cohort__slug", "gpu_model__key", "nominal")
    )


def cursor_rows(queryset: Any) -> list[tuple[Any, ...]]:
    """A ``values_list`` queryset's rows straight from the cursor, skipping Django's per-row
    iterator, which costs more than the fetch for the thousands of rows a cycle reads.

    Only for columns that need no converter: the cycle reads timestamps as epoch microseconds
    and JSON as text, converts booleans itself and reads UUIDs through ``uuid_text``.
    """
    try:
        sql, params = queryset.query.sql_with_params()
    except EmptyResultSet:  # e.g. an empty __in: the query cannot match anything
        return []
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def uuid_text(value: Any) -> str:
    """A UUID column's canonical text, whatever form the database gave it in (PostgreSQL's
    text cast is canonical already; SQLite stores 32 hex digits)."""
    if isinstance(value, str) and len(value) == 36:
        return value
    return str(value if isinstance(value, uuid.UUID) else uuid.UUID(value))


@dataclass
class Holding:
    """Jobs that hold GPUs, read once per cycle in one pass (thousands of rows at scale)."""

    running: tuple[engine.RunningAllocation, ...]
    # (cluster, node, model) -> GPUs the portal's jobs are planned on: a node with MIG slices
    # is one Node row per resource, so the row of the job's model is charged.
    planned: dict[tuple[str, str, str], int]
    job_pk: dict[str, int]


def _holding() -> Holding:
    rows = cursor_rows(
        Job.objects.filter(state__in=HOLDING_STATES, cluster__isnull=False, gpu_model__isnull=False)
        .annotate(
            public_id_text=_as_text("public_id"),
            started_us=EpochMicroseconds(F("admitted_at")),
            changed_us=EpochMicroseconds(F("state_changed_at")),
            node_plan_text=_as_text("node_plan"),
        )
        .values_list(
            "id",
            "public_id_text",
            "team__slug",
            "cluster__name",
            "gpu_model__key",
            "replicas",
            "gpus_per_replica",
            "priority",
            "started_us",
            "changed_us",
            "node_plan_text",
            "state",
        )
    )
    running = []
    plans = []
    job_pk = {}
    for pk, public_id, team, cluster, model, replicas, gpus, priority, *rest in rows:
        started_us, changed_us, plan_text, state = rest
        job_id = uuid_text(public_id)
        plan = json_tuple(plan_text)
        plans.append((cluster, plan, gpus, model))
        running.append(
            engine.running_allocation(
                job_id,
                team,
                cluster,
                model,
                replicas,
                gpus,
                priority,
                from_epoch_us(started_us or changed_us),
                # A job being preempted keeps its nodes: the engine counts its GPUs as on
                # their way back there, so a reclaim waiting for a slow delete takes no second
                # victim (a cancelling job's GPUs are not the engine's to promise).
                plan if state in PREEMPTIBLE_STATES or state == JobState.PREEMPTING else (),
                state == JobState.PREEMPTING,
            )
        )
        job_pk[job_id] = pk
    return Holding(tuple(running), planned_gpus_by_node(plans), job_pk)


def _clusters(
    planned: dict[tuple[str, str, str], int],
) -> tuple[tuple[engine.Cluster, ...], dict[str, int]]:
    """Clusters with free GPUs per node, by the one capacity rule (``clusters.capacity``).

    An over-count (a node whose plans exceed what it allocates: the replicas run elsewhere in
    the pool and the portal has not heard yet) is logged, charged to the pool's other nodes,
    and handed to ``on_over_count`` so that the cluster's bindings are read again.
    """
    pools: dict[tuple[int, str, str], list[dict[str, Any]]] = defaultdict(list)
    for n in Node.objects.filter(
        gpu_model__isnull=False, gpu_allocatable__gt=0, gpu_model__active=True
    ).values(
        "cluster_id",
        "cluster__name",
        "name",
        "gpu_model__key",
        "gpu_allocatable",
        "gpus_used_by_others",
        "ready",
        "schedulable",
    ):
        pools[(n["cluster_id"], n["cluster__name"], n["gpu_model__key"])].append(n)
    nodes_by_cluster: dict[int, list[engine.Node]] = defaultdict(list)
    over_counted: set[int] = set()
    for (cluster_id, cluster_name, model), rows in pools.items():
        loads = [
            NodeLoad(
                name=n["name"],
                allocatable=n["gpu_allocatable"],
                used_by_others=n["gpus_used_by_others"],
                planned=planned.get((cluster_name, n["name"], model), 0),
                ready=n["ready"],
                schedulable=n["schedulable"],
            )
            for n in rows
        ]
        frees, overs = pool_free(loads)
        for over in overs:
            _warn_over_count(cluster_name, model, over)
            over_counted.add(cluster_id)
        nodes_by_cluster[cluster_id].extend(
            engine.Node(
                name=load.name,
                model=model,
                total_gpus=load.allocatable,
                free_gpus=free.free,
                out_of_service_gpus=free.out_of_service,
            )
            for load, free in zip(loads, frees, strict=True)
        )
    clusters = []
    pks = {}
    for pk, name, state in Cluster.objects.values_list("id", "name", "state").order_by("name"):
        pks[name] = pk
        clusters.append(
            engine.Cluster(
                id=name,
                state=engine.ClusterState(state),
                nodes=tuple(nodes_by_cluster.get(pk, ())),
            )
        )
    if over_counted:
        _enqueue(on_over_count, sorted(over_counted))
    return tuple(clusters), pks


_over_counts_told: dict[tuple[str, str, str], int] = {}


def _warn_over_count(cluster: str, model: str, over: OverCount) -> None:
    """Log an over-count once per node and size: a cycle runs several times a second, and a
    node whose GPU failed under a running job stays over-counted until the job ends."""
    key = (cluster, model, over.node)
    if _over_counts_told.get(key) != over.over:
        if len(_over_counts_told) > 10_000:
            _over_counts_told.clear()
        _over_counts_told[key] = over.over
        log.warning("over-count on %s (%s): %s", cluster, model, over.message)


def decayed_usage(*, now: dt.datetime, half_life: dt.timedelta) -> dict[tuple[str, str], float]:
    """Cost-weighted GPU-hours per (team slug, model key), decayed by age with ``half_life``.

    Summed per day in SQL, decayed per day here: older than eight half-lives counts < 0.4 %.
    """
    since = now - 8 * half_life
    rows = (
        UsageRecord.objects.filter(hour__gte=since)
        .annotate(day=TruncDay("hour"))
        .values("team__slug", "gpu_model__key", "day")
        .annotate(w=Sum("weighted_gpu_hours"))
    )
    hl = half_life.total_seconds()
    usage: dict[tuple[str, str], float] = defaultdict(float)
    for r in rows:
        age = (now - (r["day"] + dt.timedelta(hours=12))).total_seconds()
        usage[(r["team__slug"], r["gpu_model__key"])] += r["w"] * math.pow(0.5, max(0, age) / hl)
    return usage


@dataclass
class Pending:
    """Queued jobs within the lookback, read in one pass, and per team the count beyond it."""

    jobs: tuple[engine.PendingJob, ...]
    backlog: dict[str, int]
    job_pk: dict[str, int]
    previous: dict[int, tuple[str, str, int | None]]  # pk → (code, message, position)


def _pending(lookback: int) -> Pending:
    """Each team's first ``lookback`` queued jobs in line order, and the count of the rest."""
    rank = Window(
        RowNumber(),
        partition_by=[F("team_id")],
        order_by=[F("priority").desc(), F("submitted_at").asc(), F("id").asc()],
    )
    rows = cursor_rows(
        Job.objects.filter(state=JobState.QUEUED)
        .annotate(
            rank=rank,
            public_id_text=_as_text("public_id"),
            submitted_us=EpochMicroseconds(F("submitted_at")),
            gpu_models_text=_as_text("gpu_models"),
        )
        .filter(rank__lte=lookback)
        .values_list(
            "id",
            "public_id_text",
            "team__slug",
            "submitted_us",
            "replicas",
            "gpus_per_replica",
            "priority",
            "gpu_models_text",
            "min_gpu_memory_gib",
            "min_fp16_tflops",
            "requires_bf16",
            "requires_fp8",
            "selection_policy",
            "allow_fallback",
            "pending_reason_code",
            "pending_reason",
            "queue_position",
        )
    )
    jobs = []
    job_pk = {}
    previous = {}
    loaded: dict[str, int] = defaultdict(int)
    requirements: dict[tuple[Any, ...], engine.Requirement] = {}
    for pk, public_id, team, submitted_us, replicas, gpus, priority, *rest in rows:
        models_text, memory, tflops, bf16, fp8, policy, fallback, code, message, position = rest
        needs = (models_text, memory, tflops, bf16, fp8)
        requirement = requirements.get(needs)
        if requirement is None:  # most jobs share a requirement: build each one once
            requirement = requirements[needs] = engine.Requirement(
                models=json_tuple(models_text),
                min_memory_gib=float(memory or 0),
                min_tflops_fp16=float(tflops or 0),
                bf16=bool(bf16),
                fp8=bool(fp8),
            )
        job_id = uuid_text(public_id)
        jobs.append(
            engine.PendingJob(
                id=job_id,
                team=team,
                submitted_at=from_epoch_us(submitted_us),
                gpus_per_replica=gpus,
                replicas=replicas,
                priority=priority,
                requirement=requirement,
                policy=engine.Policy(policy),
                fallback=bool(fallback),
            )
        )
        job_pk[job_id] = pk
        previous[pk] = (code, message, position)
        loaded[team] += 1
    totals = (
        Job.objects.filter(state=JobState.QUEUED)
        .values("team__slug")
        .annotate(n=Count("id"))
        .values_list("team__slug", "n")
    )
    backlog = {t: n - loaded[t] for t, n in totals if n > loaded[t]}
    return Pending(tuple(jobs), backlog, job_pk, previous)


def snapshot_load(*, now: dt.datetime, config: engine.EngineConfig) -> Loaded:
    """Read everything the engine needs (about ten queries, whatever the number of jobs)."""
    models, model_pk = engine_catalog()
    holding = _holding()
    clusters, cluster_pk = _clusters(holding.planned)
    pending = _pending(config.lookback_per_team)
    usage = decayed_usage(now=now, half_life=config.usage_half_life)
    snapshot = engine.Snapshot(
        now=now,
        models=models,
        teams=_teams(),
        quotas=_quotas(),
        cohort_quotas=_cohort_quotas(),
        clusters=clusters,
        running=holding.running,
        usage=tuple(
            engine.Usage(team=t, model=m, weighted_gpu_hours=w) for (t, m), w in usage.items()
        ),
        pending=pending.jobs,
        backlog=tuple(engine.Backlog(team=t, count=n) for t, n in pending.backlog.items()),
    )
    job_pk = {**pending.job_pk, **holding.job_pk}
    return Loaded(snapshot, job_pk, model_pk, cluster_pk, pending.previous)


# ---------------------------------------------------------------------------------------------
# 4. Persisting the decision
# ---------------------------------------------------------------------------------------------
def explanation_dict(e: engine.Explanation) -> dict[str, Any]:
    return {
        "model": e.model,
        "cluster": e.cluster,
        "message": e.message,
        "skipped": [
            {"model": n.model, "code": str(n.code), "message": n.message} for n in e.skipped
        ],
        "clusters": [
            {"cluster": n.cluster, "code": str(n.code), "message": n.message} for n in e.clusters
        ],
    }


def _admit(decision: engine.Decision, loaded: Loaded, now: dt.datetime) -> list[int]:
    changes = [
        Change(
            job_id=loaded.job_pk[a.job_id],
            updates={
                "cluster_id": loaded.cluster_pk[a.cluster],
                "gpu_model_id": loaded.model_pk[a.model],
                "node_plan": list(a.node_plan),
                "placement": {
                    **explanation_dict(a.explanation),
                    "borrowed_gpus": a.borrowed_gpus,
                    "starvation_guard": a.starvation_guard,
                },
                "pending_reason_code": "",
                "pending_reason": "",
                "queue_position": None,
            },
            message=a.explanation.message,
        )
        for a in decision.admissions
    ]
    won = jobs_transition_bulk(
        changes=changes, expected=JobState.QUEUED, to=JobState.ADMITTED, reason="Admitted", now=now
    )
    return [c.job_id for c in changes if c.job_id in won]


def _preempt(decision: engine.Decision, loaded: Loaded, now: dt.datetime) -> list[int]:
    preempted = []
    for p in decision.preemptions:
        pk = loaded.job_pk.get(p.job_id)
        if pk is not None and job_transition(
            job_id=pk,
            expected=PREEMPTIBLE_STATES,
            to=JobState.PREEMPTING,
            reason="Preempted",
            message=p.message,
            now=now,
        ):
            preempted.append(pk)
    return preempted


def _reason_rows(decision: engine.Decision, loaded: Loaded) -> list[tuple[int, str, str, int]]:
    rows = [(loaded.job_pk[r.job_id], str(r.code), r.message, r.position) for r in decision.pending]
    for nc in decision.not_considered:
        for k, job_id in enumerate(nc.job_ids):
            rows.append(
                (
                    loaded.job_pk[job_id],
                    str(engine.ReasonCode.NOT_CONSIDERED),
                    nc.message,
                    nc.position_from + k,
                )
            )
    return [row for row in rows if loaded.previous.get(row[0]) != row[1:]]


def _write_reasons(rows: list[tuple[int, str, str, int]]) -> None:
    """Reasons and positions of jobs still queued, in one statement per 2,000 rows."""
    if not rows:
        return
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE portal_job AS j SET pending_reason_code = v.code, "
                "pending_reason = v.msg, queue_position = v.pos "
                "FROM jsonb_to_recordset(%s::jsonb) AS v(id bigint, code text, msg text, pos int) "
                "WHERE j.id = v.id AND j.state = 'QUEUED'",
                [json.dumps([{"id": r[0], "code": r[1], "msg": r[2], "pos": r[3]} for r in rows])],
            )
        return
    for pk, code, message, position in rows:  # SQLite (the demo): few rows, one each
        Job.objects.filter(pk=pk, state=JobState.QUEUED).update(
            pending_reason_code=code, pending_reason=message, queue_position=position
        )


def _enqueue(hooks: list[Callable[[list[int]], None]], ids: list[int]) -> None:
    if ids:
        for hook in hooks:
            transaction.on_commit(lambda h=hook: h(ids))


# ---------------------------------------------------------------------------------------------
# The cycle
# ---------------------------------------------------------------------------------------------
@contextmanager
def collector_paused() -> Iterator[None]:
    """Keep Python's cyclic garbage collector out of one cycle's load, decide and persist.

    A cycle over 10,000 queued jobs allocates a few hundred thousand short-lived objects
    (rows, engine dataclasses, reasons) and almost no cyclic garbage, yet those allocations set
    off enough collections, each walking the worker's whole heap, to weigh on the cycle.
    Reference counting still frees everything as usual; whatever cycles the cycle leaves are
    collected once the collector is back on.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_cycle(*, now: dt.datetime | None = None) -> CycleResult:
    """Run one scheduling cycle unless another process is running one (then ``ran=False``)."""
    timings: dict[str, float] = {}
    with scheduler_lock() as got:  # 1
        if not got:
            return CycleResult(ran=False)
        now = now or timezone.now()
        config = engine_config()
        with collector_paused():
            t0 = time.perf_counter()
            loaded = snapshot_load(now=now, config=config)  # 2
            t1 = time.perf_counter()
            decision = engine.decide(loaded.snapshot, config)  # 3
            t2 = time.perf_counter()
            with transaction.atomic():  # 4
                admitted = _admit(decision, loaded, now)
                preempted = _preempt(decision, loaded, now)
                _write_reasons(_reason_rows(decision, loaded))
                _enqueue(on_admitted, admitted)  # 5
                _enqueue(on_preempted, preempted)
            t3 = time.perf_counter()
    timings = {"load": (t1 - t0) * 1e3, "decide": (t2 - t1) * 1e3, "persist": (t3 - t2) * 1e3}
    observe_cycle(seconds=t3 - t0)
    log.info(
        "cycle: %d admitted, %d preempted, %d pending (%s)",
        len(admitted),
        len(preempted),
        len(decision.pending),
        ", ".join(f"{k} {v:.1f} ms" for k, v in timings.items()),
    )
    return CycleResult(
        ran=True,
        admitted=admitted,
        preempted=preempted,
        pending=len(decision.pending),
        timings_ms=timings,
    )
