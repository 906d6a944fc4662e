"""The cycle's snapshot: everything the pure engine needs, read in about ten queries whatever the
number of jobs (step 2 of ``scheduling.cycle``).

Also read by the pages that must agree with the cycle (the submit form's preview, the drain
impact, the dashboards' fair share): they call the same loaders, so their numbers are the
cycle's own numbers.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import logging
import math
import threading
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import (
    BigIntegerField,
    Count,
    F,
    Func,
    Sum,
    TextField,
    Value,
    Window,
)
from django.db.models.functions import Cast, Coalesce, Least, RowNumber, TruncDay
from django.utils import timezone

from portal import hooks
from portal.models import (
    HOLDING_STATES,
    PREEMPTIBLE_STATES,
    Job,
    JobState,
    Priority,
    Team,
)
from rules import engine
from rules.capacity import (
    NodeLoad,
    OverCount,
    device_books,
    planned_gpus_by_node,
    pool_free,
)
from rules.jobspec import CONSTRAINT_FIELDS
from scheduling.catalog import mig_whole_gpu
from scheduling.inventory import Cluster, Node
from scheduling.models import (
    DEFAULT_COHORT_SLUG,
    CohortQuota,
    GpuModel,
    Quota,
    TeamPolicy,
    UsageRecord,
)
from scheduling.preemption_rules import protect_young

log = logging.getLogger(__name__)

# The snapshot hands clusters whose books over-count a node to the clusters side through
# ``portal.hooks.over_counted``; this is that hook under the name the snapshot code uses.
on_over_count = hooks.over_counted


def engine_config() -> engine.EngineConfig:
    return engine.EngineConfig(
        lookback_per_team=settings.GPUPOOL_SCHEDULER_LOOKBACK,
        starvation_wait=dt.timedelta(minutes=settings.GPUPOOL_STARVATION_WAIT_MINUTES),
        usage_half_life=dt.timedelta(hours=settings.GPUPOOL_USAGE_HALF_LIFE_HOURS),
        preemption=settings.GPUPOOL_PREEMPTION,
        # GPUs preempted per cycle at most, preemptions under way included (0: no budget).
        preemption_budget_gpus=settings.GPUPOOL_PREEMPTION_BUDGET_GPUS or None,
    )


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


Previous = tuple[str, str, int | None, str | None, str]
"""What a queued job shows now: (code, message, order key, key of its candidate notes, closest
candidate's model): a reason is written only where one of them changes."""


@dataclass
class Loaded:
    """The snapshot plus what persisting needs to map engine ids back to rows."""

    snapshot: engine.Snapshot
    job_pk: dict[str, int]
    model_pk: dict[str, int]
    cluster_pk: dict[str, int]
    previous: dict[int, Previous]


def engine_model(m: GpuModel, shared_of: str = "") -> engine.GpuModel:
    """A catalog row as the engine sees it (``shared_of``: the key of the card's shared pool)."""
    return engine.GpuModel(
        key=m.key,
        name=m.key,
        cost_factor=m.cost_factor,
        tflops_fp16=m.fp16_tflops,
        memory_gib=float(m.memory_gib),
        bf16=m.bf16,
        fp8=m.fp8,
        slice_of=mig_whole_gpu(m.key, m.resource_name),
        shared_of=shared_of,
    )


def engine_catalog() -> tuple[tuple[engine.GpuModel, ...], dict[str, int]]:
    rows = list(
        GpuModel.objects.filter(active=True).select_related("shares").order_by("cost_factor", "key")
    )
    models = tuple(engine_model(m, m.shares.key if m.shares is not None else "") for m in rows)
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
    # (cluster, node, model) -> (GiB, device, compute %) of each replica planned there, oldest
    # admission first, for the models in ``shared``: what the per-device books are built from.
    # The device is the one the share's device plan names ("" where unknown).
    shares: dict[tuple[str, str, str], list[tuple[int, str, int]]] = dataclasses.field(
        default_factory=dict
    )
    # (cluster, node) -> (milli-CPU, MiB) the portal's jobs planned there ask per node: what
    # the inventory's free CPU and memory (foreign pods already taken off) loses to them.
    host: dict[tuple[str, str], tuple[int, int]] = dataclasses.field(default_factory=dict)


def effective_priority() -> Any:
    """A job's priority as the cycle counts it: at most what its team's policy allows now.

    ``max_priority`` is checked at submit; a job submitted before a platform admin lowered it
    keeps its stored priority (shown on its page) but neither jumps the line nor is shielded
    from preemption by it. A team without a policy may use up to normal.
    """
    allowed = Coalesce(F("team__policy__max_priority"), Value(int(Priority.NORMAL)))
    return Least(F("priority"), allowed)


def _holding(shared: frozenset[str] = frozenset()) -> Holding:
    """Every job holding GPUs; for the models in ``shared`` (shared pools) also each replica's
    GiB per node, from which :func:`device_books` rebuilds the devices' books."""
    rows = cursor_rows(
        Job.objects.filter(state__in=HOLDING_STATES, cluster__isnull=False, gpu_model__isnull=False)
        .annotate(
            public_id_text=_as_text("public_id"),
            started_us=EpochMicroseconds(F("admitted_at")),
            changed_us=EpochMicroseconds(F("state_changed_at")),
            node_plan_text=_as_text("node_plan"),
            # Read only where a shared pool books devices: a cast per holding row and cycle.
            device_plan_text=_as_text("device_plan") if shared else Value("[]"),
            counted_priority=effective_priority(),
        )
        .values_list(
            "id",
            "public_id_text",
            "team__slug",
            "cluster__name",
            "gpu_model__key",
            "replicas",
            "gpus_per_replica",
            "counted_priority",
            "started_us",
            "changed_us",
            "node_plan_text",
            "state",
            "device_plan_text",
            "gpu_cores_percent",
            "cpu_millicores",
            "memory_mib",
        )
    )
    running = []
    plans = []
    job_pk = {}
    host: dict[tuple[str, str], tuple[int, int]] = {}
    shares: dict[tuple[str, str, str], list[tuple[int, int, str, int]]] = defaultdict(list)
    for pk, public_id, team, cluster, model, replicas, gpus, priority, *rest in rows:
        started_us, changed_us, plan_text, state, devices_text, cores, cpu, mem = rest
        job_id = uuid_text(public_id)
        plan = json_tuple(plan_text)
        plans.append((cluster, plan, gpus, model))
        asks = (cpu or 0, mem or 0)
        for node in plan:
            had = host.get((cluster, node))
            host[(cluster, node)] = asks if had is None else (had[0] + asks[0], had[1] + asks[1])
        if model in shared:
            devices = json_tuple(devices_text) if devices_text != "[]" else ()
            since = started_us or changed_us or 0
            for replica, node in enumerate(plan):
                device = devices[replica] if replica < len(devices) else ""
                shares[(cluster, node, model)].append((since, gpus, str(device or ""), cores or 0))
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
                None,
                cpu or 0,
                mem or 0,
            )
        )
        job_pk[job_id] = pk
    return Holding(
        tuple(running),
        planned_gpus_by_node(plans),
        job_pk,
        {
            key: [(gib, device, cores) for _, gib, device, cores in sorted(replicas)]
            for key, replicas in shares.items()
        },
        host,
    )


def _devices_of(node_pks: list[int]) -> dict[int, list[dict[str, Any]]]:
    """The devices the inventory read on these nodes of a shared pool (a JSON column, read
    only for shared pools: decoding it for every node of every cycle is not free)."""
    return dict(Node.objects.filter(pk__in=node_pks).values_list("pk", "devices"))


def _host_free(node: dict[str, Any], planned: tuple[int, int]) -> dict[str, int | None]:
    """The node's free CPU and memory for the engine (None: not reported, not checked)."""
    cpu, mem = node["cpu_free_millicores"], node["memory_free_mib"]
    return {
        "cpu_free": None if cpu is None else max(0, cpu - planned[0]),
        "memory_free": None if mem is None else max(0, mem - planned[1]),
    }


def _clusters(
    planned: dict[tuple[str, str, str], int],
    shares: dict[tuple[str, str, str], list[tuple[int, str, int]]] | None = None,
    device_gib: dict[str, int] | None = None,
    host: dict[tuple[str, str], tuple[int, int]] | None = None,
) -> tuple[tuple[engine.Cluster, ...], dict[str, int]]:
    """Clusters with free GPUs per node, by the one capacity rule (``rules.capacity``), and
    each one's state (an enabled cluster marked unreachable is ``UNREACHABLE``).

    An over-count (a node whose plans exceed what it allocates: the replicas run elsewhere in
    the pool and the portal has not heard yet) is logged, charged to the pool's other nodes,
    and handed to ``on_over_count`` so that the cluster's bindings are read again.

    A node of a shared pool (a model in ``device_gib``: its device size in GiB) gets its
    devices' free GiB and UUIDs (:func:`device_books`), so that the engine admits a share only
    where one device holds it and names the device; the manifest pins it there (HAMi's and
    Volcano vGPU's device-UUID annotations), so the portal picks the device (no
    ``device_policy``). A node whose devices the inventory does not know is left to the
    cluster's scheduler, ``binpack``.

    CPU and memory: what the inventory found free of foreign pods, less what the portal's jobs
    planned on the node ask (``host``); a node that reports none is not checked.
    """
    shares = shares or {}
    host = host or {}
    device_gib = device_gib or {}
    # A pool per GPU resource too: a MIG profile offered as ``nvidia.com/gpu`` on single-
    # strategy nodes and as ``nvidia.com/mig-…`` on mixed ones is one catalog model but two
    # pools (``engine.Node.group``), since a job's pods ask for one resource name.
    pools: dict[tuple[int, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for n in Node.objects.filter(
        gpu_model__isnull=False, gpu_allocatable__gt=0, gpu_model__active=True
    ).values(
        "cluster_id",
        "cluster__name",
        "name",
        "gpu_model__key",
        "gpu_resource",
        "gpu_allocatable",
        "gpus_used_by_others",
        "ready",
        "schedulable",
        "cpu_free_millicores",
        "memory_free_mib",
        "pk",
    ):
        key = (n["cluster_id"], n["cluster__name"], n["gpu_model__key"], n["gpu_resource"])
        pools[key].append(n)
    nodes_by_cluster: dict[int, list[engine.Node]] = defaultdict(list)
    over_counted: set[int] = set()
    for (cluster_id, cluster_name, model, resource), rows in pools.items():
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
        size = device_gib.get(model, 0)
        devices_of = _devices_of([n["pk"] for n in rows]) if size else {}
        for n, load, free in zip(rows, loads, frees, strict=True):
            books, ids, cores = (
                device_books(
                    load.allocatable,
                    size,
                    load.used_by_others,
                    shares.get((cluster_name, load.name, model), []),
                    devices_of.get(n["pk"]),
                )
                if size
                else ([], (), [])
            )
            nodes_by_cluster[cluster_id].append(
                engine.Node(
                    name=load.name,
                    model=model,
                    total_gpus=load.allocatable,
                    free_gpus=free.free,
                    out_of_service_gpus=free.out_of_service,
                    group=resource,
                    devices=tuple(books),
                    device_ids=ids,
                    device_cores=tuple(cores),
                    # The portal pins the device where it knows the devices' UUIDs.
                    device_policy="binpack" if size and not ids else "",
                    **_host_free(n, host.get((cluster_name, load.name), (0, 0))),
                )
            )
    clusters = []
    pks = {}
    rows = Cluster.objects.values_list("id", "name", "state", "unreachable_since").order_by("name")
    for pk, name, state, unreachable_since in rows:
        pks[name] = pk
        # An enabled cluster shown unreachable takes nothing new: a job admitted there would
        # only wait for it (docs/reliability.md). Its jobs still count, as on a drained one.
        if state == engine.ClusterState.ENABLED and unreachable_since is not None:
            state = engine.ClusterState.UNREACHABLE
        clusters.append(
            engine.Cluster(
                id=name,
                state=engine.ClusterState(state),
                nodes=tuple(nodes_by_cluster.get(pk, ())),
            )
        )
    if over_counted:
        on_over_count.fire_on_commit(sorted(over_counted))
    return tuple(clusters), pks


def clusters_now() -> tuple[engine.Cluster, ...]:
    """Every cluster with its free GPUs per node as the next cycle will see them: the submit
    form's preview says from this which models are full now, by the cycle's own numbers."""
    device_gib = _device_gib(engine_catalog()[0])
    holding = _holding(frozenset(device_gib))
    return _clusters(holding.planned, holding.shares, device_gib, holding.host)[0]


def _device_gib(models: tuple[engine.GpuModel, ...]) -> dict[str, int]:
    """Shared pools' device size in GiB (the card's memory), by model key."""
    return {m.key: int(m.memory_gib) for m in models if m.shared_of and m.memory_gib >= 1}


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
    previous: dict[int, Previous]


_JOB_FIELDS = (
    "id",
    "public_id_text",
    "team__slug",
    "submitted_us",
    "replicas",
    "gpus_per_replica",
    "counted_priority",
    "gpu_models_text",
    *CONSTRAINT_FIELDS,
    "gpu_memory_gib",
    "gpu_cores_percent",
    "selection_policy",
    "allow_fallback",
    "cpu_millicores",
    "memory_mib",
)
"""What ``_pending`` reads of a queued job itself: all a ``PendingJob`` is built from."""
_WAIT_FIELDS = ("wait__code", "wait__reason", "wait__order_key", "wait__notes_id", "wait__model")
"""The last cycle's words (``JobWait``; none yet for a job no cycle has seen)."""
_JOB_COLUMNS = len(_JOB_FIELDS)


class _PendingMemo(threading.local):
    """The queued jobs the last load of this thread built, by primary key, with the columns
    each was built from.

    A deep queue is mostly the same jobs from one cycle to the next, and building 10,000
    frozen ``PendingJob`` objects was about half of the queue's load. A job is taken from
    here only when every column it was built from reads the same again, so the memo can
    never hand the engine a job that differs from its row; only the last load's jobs are
    kept."""

    def __init__(self) -> None:
        self.jobs: dict[int, tuple[tuple[Any, ...], engine.PendingJob]] = {}
        self.requirements: dict[tuple[Any, ...], engine.Requirement] = {}


_pending_memo = _PendingMemo()
_POLICIES = {p.value: p for p in engine.Policy}  # an Enum call per job costs more than this


def _pending_job(columns: tuple[Any, ...]) -> engine.PendingJob:
    """A queued job as the engine sees it, from its row's ``_JOB_FIELDS``."""
    _, public_id, team, submitted_us, replicas, gpus, priority, *rest = columns
    # memory, bf16, fp8, tflops: CONSTRAINT_FIELDS' order (a test builds each from its row)
    models_text, memory, bf16, fp8, tflops, share_gib, cores, policy, fallback, *more = rest
    cpu, host_mib = more
    needs = (models_text, memory, tflops, bf16, fp8, share_gib is not None)
    requirements = _pending_memo.requirements
    requirement = requirements.get(needs)
    if requirement is None:  # most jobs share a requirement: build each one once
        if len(requirements) > 10_000:
            requirements.clear()
        requirement = requirements[needs] = engine.Requirement(
            models=json_tuple(models_text),
            min_memory_gib=float(memory or 0),
            min_tflops_fp16=float(tflops or 0),
            bf16=bool(bf16),
            fp8=bool(fp8),
            shared=share_gib is not None,
        )
    return engine.PendingJob(
        id=uuid_text(public_id),
        team=team,
        submitted_at=from_epoch_us(submitted_us),  # type: ignore[arg-type]
        gpus_per_replica=gpus,
        replicas=replicas,
        priority=priority,
        requirement=requirement,
        policy=_POLICIES.get(policy) or engine.Policy(policy),
        fallback=bool(fallback),
        cores_percent=cores or 0,
        cpu_milli=cpu or 0,
        memory_mib=host_mib or 0,
    )


def _pending(lookback: int) -> Pending:
    """Each team's first ``lookback`` queued jobs in line order, and the count of the rest."""
    rank = Window(
        RowNumber(),
        partition_by=[F("team_id")],
        order_by=[F("counted_priority").desc(), F("submitted_at").asc(), F("id").asc()],
    )
    rows = cursor_rows(
        Job.objects.filter(state=JobState.QUEUED)
        .annotate(counted_priority=effective_priority())
        .annotate(
            rank=rank,
            public_id_text=_as_text("public_id"),
            submitted_us=EpochMicroseconds(F("submitted_at")),
            gpu_models_text=_as_text("gpu_models"),
        )
        .filter(rank__lte=lookback)
        .values_list(*_JOB_FIELDS, *_WAIT_FIELDS)
    )
    jobs = []
    job_pk = {}
    previous = {}
    loaded: dict[str, int] = defaultdict(int)
    memo = _pending_memo.jobs
    seen: dict[int, tuple[tuple[Any, ...], engine.PendingJob]] = {}
    for row in rows:
        pk = row[0]
        columns = row[:_JOB_COLUMNS]
        cached = memo.get(pk)
        job = cached[1] if cached is not None and cached[0] == columns else _pending_job(columns)
        seen[pk] = (columns, job)
        jobs.append(job)
        job_pk[job.id] = pk
        previous[pk] = row[_JOB_COLUMNS:]
        loaded[job.team] += 1
    _pending_memo.jobs = seen
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
    device_gib = _device_gib(models)
    holding = _holding(frozenset(device_gib))
    clusters, cluster_pk = _clusters(holding.planned, holding.shares, device_gib, holding.host)
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
    # Young jobs' minimum runtimes are part of the pool's truth: the cycle, the what-if preview
    # and the start estimates all decide with them.
    return Loaded(protect_young(snapshot), job_pk, model_pk, cluster_pk, pending.previous)


def pool_now() -> tuple[engine.Snapshot, engine.EngineConfig]:
    """The pool as the next cycle would see it now, and the engine's configuration: what the
    on-demand estimates (a job's alternatives, an unsubmitted spec) simulate from."""
    config = engine_config()
    return snapshot_load(now=timezone.now(), config=config).snapshot, config


def quota_lines() -> tuple[
    tuple[engine.Team, ...], tuple[engine.Quota, ...], tuple[engine.CohortQuota, ...]
]:
    """Teams (with their cohorts), quotas and cohort quotas as the next cycle reads them: what
    the submit's quota check (``scheduling.quota_check``) bounds a job by."""
    return _teams(), _quotas(), _cohort_quotas()
