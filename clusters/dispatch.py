"""From an admitted job to a Volcano Job, and back off the cluster (cancel and preemption).

The job row is the outbox: each task here loads the row, checks its state, talks to the
cluster, and records the outcome with a compare-and-set, so a duplicated, late or reordered
message does nothing harmful.

Dispatch (``ADMITTED → SUBMITTED``)
    The Volcano Job's name is derived from the job's UUID, so a retried create cannot make a
    twin: it gets ``409 AlreadyExists``. The object then carries a submission UID (derived
    from the job's UUID and the admission time): the same UID means an earlier attempt of
    this very dispatch got through, and the object is adopted; another UID means someone
    else's object (or one left from an earlier admission) and it is never overwritten.
    Overload and network trouble (5xx, 429, timeouts) are retried with exponential backoff
    and full jitter, honouring ``Retry-After``, up to ``GPUPOOL_DISPATCH_MAX_ATTEMPTS``;
    what retrying cannot fix (400/422 validation, 403) fails the job with the API server's
    own words. A missing team queue or job namespace (a queue sync that has not run yet, a
    cluster whose API server restarted empty) is repaired once per admission: the team's
    namespace is made again and the cluster's queues synced, then the create is tried again;
    if it is still refused, the job fails saying why. If the job left ADMITTED while the
    create was in flight (cancelled, preempted), the object just created is deleted again.

Cancel (``CANCELLING → CANCELLED``) and eviction (``PREEMPTING → QUEUED``)
    Delete the Volcano Job with background propagation and move on once a read says it is
    gone; a job still being deleted (finalizers) is looked at again a little later, and the
    watcher's DELETED event or the reconcile finish the job if this task does not.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from clusters import volcano
from clusters.inventory import AMD_PRODUCT, GFD_PRODUCT, GPU_TAINT
from clusters.kube import KubeError
from clusters.models import Cluster, Node, VolcanoJobRecord
from clusters.services import (
    ClusterUnavailable,
    cluster_client,
    cluster_job_namespace,
    job_namespace_ensure,
)
from portal.jobs.state import cancelling_end, job_transition, preempting_end
from portal.models import Job, JobEvent, JobState

log = logging.getLogger(__name__)

__all__ = [
    "Outcome",
    "job_cancel_on_cluster",
    "job_dispatch",
    "job_evict",
    "job_manifest",
    "submission_uid",
]

MAX_BACKOFF_SECONDS = 60.0
# A server's Retry-After is honoured up to this: a misconfigured proxy answering "a day" must
# not park a job for a day, nor outlast the broker's visibility timeout (1 h), after which
# Redis would deliver the countdown task a second time.
MAX_RETRY_AFTER_SECONDS = 300.0
# Admission errors a retry cannot fix but a queue sync can: the team's queue is missing or
# closed on the cluster (it is created by the queue sync, which may not have run yet).
QUEUE_PROBLEMS = ("unable to find job queue", "can only submit job to queue with state")


def repairable(exc: KubeError, namespace: str) -> bool:
    """Whether a refused create lacks what the portal itself makes on a cluster: the team's
    queue (missing or closed) or the job namespace (``namespaces "gp-x" not found``)."""
    if any(p in exc.message for p in QUEUE_PROBLEMS):
        return True
    return exc.not_found and f'namespaces "{namespace}" not found' in exc.message


@dataclass(frozen=True)
class Outcome:
    """What a task should do next: nothing, or run again in ``retry_in`` seconds."""

    done: bool
    message: str = ""
    retry_in: float | None = None


def submission_uid(job: Job) -> str:
    """The UID written on the Volcano Job: one per (job, admission).

    A requeued job is admitted again with a new ``admitted_at``, so an object that survived
    from its earlier run never looks like this run's.
    """
    admitted = job.admitted_at.isoformat() if job.admitted_at else "-"
    return str(uuid.uuid5(job.public_id, f"gpupool-admission:{admitted}"))


def job_event_record(job: Job, reason: str, message: str) -> None:
    """A fact about a job that does not change its state (from_state == to_state)."""
    JobEvent.objects.create(
        job_id=job.pk,
        created_at=timezone.now(),
        from_state=job.state,
        to_state=job.state,
        reason=reason[:64],
        message=message,
    )


def backoff_seconds(attempt: int, retry_after: float | None = None) -> float:
    """Exponential backoff with full jitter; a server's Retry-After is a floor, not a hint."""
    base = settings.GPUPOOL_DISPATCH_BACKOFF_MS / 1000.0
    ceiling = min(MAX_BACKOFF_SECONDS, base * (2 ** max(0, attempt - 1)))
    delay = random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not a secret
    if retry_after is not None:
        floor = min(retry_after, MAX_RETRY_AFTER_SECONDS)
        delay = max(delay, floor + random.uniform(0, base / 2))  # noqa: S311
    return delay


# ---------------------------------------------------------------------------------------------
# The manifest
# ---------------------------------------------------------------------------------------------
_NODES_TTL = 30.0
_PRODUCT_LABELS = (GFD_PRODUCT, AMD_PRODUCT)
HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True)
class _ClusterNodes:
    """A cluster's GPU node rows as a dispatch needs them, cached for a few seconds per
    process: labels and resources change with the inventory, not per job."""

    loaded_at: float
    gpu_label: str
    by_model: dict[int | None, dict[str, Node]]
    # (GPU resource, label, value) → the models whose nodes carry that label and offer that
    # resource: a selector is only safe when this model is the only one.
    claims: dict[tuple[str, str, str], set[int | None]]


_nodes_cache: dict[int | None, _ClusterNodes] = {}


def _cluster_nodes(cluster: Cluster, *, needed: Iterable[str] = ()) -> _ClusterNodes:
    """The cached rows, read again when older than a few seconds, when the cluster's label
    changed, or when a ``needed`` node (one the job was planned on) is not among them: the
    cycle may have planned on nodes an inventory sync added after this cache was filled."""
    cached = _nodes_cache.get(cluster.pk)
    if (
        cached is not None
        and time.monotonic() - cached.loaded_at <= _NODES_TTL
        and cached.gpu_label == cluster.gpu_label
        and all(any(name in nodes for nodes in cached.by_model.values()) for name in needed)
    ):
        return cached
    keys = (cluster.gpu_label, *_PRODUCT_LABELS)
    by_model: dict[int | None, dict[str, Node]] = {}
    claims: dict[tuple[str, str, str], set[int | None]] = {}
    rows = Node.objects.filter(cluster_id=cluster.pk).only(
        "name", "gpu_resource", "labels", "gpu_model_id"
    )
    for node in rows:
        by_model.setdefault(node.gpu_model_id, {})[node.name] = node
        labels = node.labels or {}
        for key in keys:
            if key in labels:
                claims.setdefault((node.gpu_resource, key, str(labels[key])), set()).add(
                    node.gpu_model_id
                )
    cached = _ClusterNodes(time.monotonic(), cluster.gpu_label, by_model, claims)
    _nodes_cache[cluster.pk] = cached
    return cached


def _model_nodes(job: Job, nodes: _ClusterNodes) -> list[Node]:
    """The model's nodes on the job's cluster: the planned ones if the inventory has them."""
    mine = nodes.by_model.get(job.gpu_model_id, {})
    planned = [mine[name] for name in dict.fromkeys(job.node_plan or []) if name in mine]
    return planned or list(mine.values())


def _node_labels(
    cluster: Cluster, job: Job, nodes: list[Node], claims: dict[tuple[str, str, str], set[Any]]
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(nodeSelector, labels that may take several values) that select the model's nodes.

    A label is used only when every one of the nodes carries it and no node of another model
    offering the same GPU resource shares its value: a MIG-single node still labelled with its
    card (``gpu-type=a100-80gb``) must not pull a slice job onto whole A100s. One common value
    is a plain nodeSelector (the cluster's label first, then GPU Feature Discovery's product);
    failing that, a product spelled two ways across a driver upgrade becomes an ``In``
    affinity; when no label is safe, the nodes are named (``kubernetes.io/hostname In``).
    Without inventory, the cluster's label with the catalog key.
    """
    assert job.gpu_model is not None
    if not nodes:
        return {cluster.gpu_label: job.gpu_model.key}, {}
    keys = (cluster.gpu_label, *_PRODUCT_LABELS)
    resources = {n.gpu_resource for n in nodes}
    usable: dict[str, set[str]] = {}
    for key in keys:
        values = {(n.labels or {}).get(key) for n in nodes}
        if None in values:
            continue
        if all(
            claims.get((r, key, str(v)), set()) <= {job.gpu_model_id}
            for r in resources
            for v in values
        ):
            usable[key] = {str(v) for v in values}
    for key in keys:
        if len(usable.get(key, ())) == 1:
            return {key: next(iter(usable[key]))}, {}
    for key in keys:
        if key in usable:
            return {}, {key: sorted(usable[key])}
    # No label tells them apart from another model's nodes: name them.
    return {}, {HOSTNAME_LABEL: sorted({_hostname(n) for n in nodes})}


def _hostname(node: Node) -> str:
    return str((node.labels or {}).get(HOSTNAME_LABEL) or node.name)


def job_manifest(job: Job) -> tuple[str, dict[str, Any]]:
    """(namespace, Volcano Job manifest) for an admitted job."""
    cluster, model = job.cluster, job.gpu_model
    assert cluster is not None and model is not None
    inventory = _cluster_nodes(cluster, needed=job.node_plan or ())
    nodes = _model_nodes(job, inventory)
    resource = nodes[0].gpu_resource if nodes else model.resource_name
    node_selector, node_label_in = _node_labels(cluster, job, nodes, inventory.claims)
    namespace = cluster_job_namespace(cluster, job.team.slug)
    # No effect named: the GPU taint is tolerated whatever its effect, exactly what the
    # inventory assumes when it counts a node tainted nvidia.com/gpu as schedulable.
    tolerations = (volcano.Toleration(key=GPU_TAINT),) if cluster.tolerate_gpu_taint else ()
    spec = volcano.VolcanoJobSpec(
        job_id=str(job.public_id),
        display_name=job.name,
        team_slug=job.team.slug,
        namespace=namespace,
        queue=volcano.volcano_queue_name(job.team.slug),
        kind=job.kind,  # type: ignore[arg-type]
        image=job.image,
        command=list(job.command or []),
        args=list(job.args or []),
        env=dict(job.env or {}),
        replicas=job.replicas,
        gpus_per_replica=job.gpus_per_replica,
        gpu_resource=resource,
        gpu_model=model.key,
        node_selector=node_selector,
        node_label_in=node_label_in,
        cpu_millicores=job.cpu_millicores,
        memory_mib=job.memory_mib,
        max_runtime_seconds=job.max_runtime_seconds,
        max_retry=job.max_retry,
        port=job.port,
        scheduler_name=cluster.scheduler_name,
        submission_uid=submission_uid(job),
        portal_url=f"{settings.SITE_URL.rstrip('/')}/jobs/{job.public_id}/",
        tolerations=tolerations,
        automount_service_account_token=cluster.mount_service_account_token,
        run_as_non_root=cluster.run_as_non_root,
    )
    return namespace, volcano.build_volcano_job(spec)


# ---------------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------------
def _jobs() -> Any:
    """Jobs with what a dispatch reads (the scheduler's explanation and reason are left out:
    they are the largest columns and no manifest needs them)."""
    return Job.objects.select_related("cluster", "gpu_model", "team").defer(
        "placement", "pending_reason", "gpu_models", "team__description"
    )


# Columns a batch dispatch never reads. Leaving them out spares their converters (four
# timestamps, two JSON documents) on every row, the largest part of loading a batch. The
# batch touches only what job_manifest, submission_uid and the transition need; anything
# unusual goes to the one-job path, which loads the job whole.
_NOT_FOR_THE_BATCH = (
    "owner",
    "gpu_models",
    "min_gpu_memory_gib",
    "requires_bf16",
    "requires_fp8",
    "min_fp16_tflops",
    "selection_policy",
    "allow_fallback",
    "priority",
    "state_changed_at",
    "submitted_at",
    "started_at",
    "finished_at",
    "pending_reason_code",
    "queue_position",
    "volcano_job_name",
    "dispatch_next_at",
    "usage_accounted_until",
    "idempotency_key",
    "request_fingerprint",
)


def _load(job_id: int) -> Job | None:
    return _jobs().filter(pk=job_id).first()


def _fail(job: Job, reason: str, message: str) -> Outcome:
    job_transition(
        job_id=job.pk,
        expected=JobState.ADMITTED,
        to=JobState.FAILED,
        reason=reason,
        message=message,
    )
    log.info("job %s failed to dispatch: %s", job.pk, message)
    return Outcome(done=True, message=message)


def _retry(job: Job, attempt: int, problem: str, retry_after: float | None = None) -> Outcome:
    """Back off, or fail the job once its attempts are spent.

    The due time goes on the row so the reconcile, which re-enqueues jobs left ADMITTED too
    long, does not start a second retry chain beside one that is only waiting.
    """
    if attempt >= settings.GPUPOOL_DISPATCH_MAX_ATTEMPTS:
        return _fail(
            job,
            "DispatchFailed",
            f"Could not create the Volcano Job after {attempt} attempts: {problem}",
        )
    delay = backoff_seconds(attempt, retry_after)
    Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).update(
        dispatch_next_at=timezone.now() + dt.timedelta(seconds=delay)
    )
    job_event_record(
        job, "DispatchRetry", f"Attempt {attempt}: {problem}; retrying in {delay:.1f} s"
    )
    return Outcome(done=False, message=problem, retry_in=delay)


_RECORD_FIELDS = [
    "cluster",
    "namespace",
    "name",
    "submission_uid",
    "uid",
    "phase",
    "retry_count",
    "pods",
    "reported",
    "created_at",
    "seen_at",
    "deleted_at",
]


def _records_upsert(rows: list[tuple[Job, str, dict[str, Any], str]]) -> None:
    """Upsert VolcanoJobRecords in one statement (a requeued job already has one)."""
    now = timezone.now()
    values = []
    for job, namespace, obj, uid in rows:
        meta = obj.get("metadata") or {}
        values.append(
            {
                "job_id": job.pk,
                "cluster_id": job.cluster_id,
                "namespace": namespace,
                "name": meta.get("name", ""),
                "submission_uid": uid,
                "uid": str(meta.get("uid") or ""),
                "phase": str(((obj.get("status") or {}).get("state") or {}).get("phase") or ""),
                "retry_count": 0,
                "pods": {},
                "reported": [],
                "created_at": now,
                "seen_at": now,
                "deleted_at": None,
            }
        )
    if not values:
        return
    if connection.vendor == "postgresql":
        _records_upsert_postgres(values)
        return
    VolcanoJobRecord.objects.bulk_create(
        [VolcanoJobRecord(**v) for v in values],
        update_conflicts=True,
        unique_fields=["job"],
        update_fields=_RECORD_FIELDS,
    )


def _records_upsert_postgres(values: list[dict[str, Any]]) -> None:
    """``INSERT … SELECT FROM jsonb_to_recordset(%s) ON CONFLICT (job_id) DO UPDATE``: the same
    upsert as ``bulk_create(update_conflicts=True)`` at a fraction of its CPU (one parameter,
    no model instances, no per-field compilation), paid for every job a dispatch creates."""
    meta = VolcanoJobRecord._meta
    fields = [meta.get_field(name) for name in ["job", *_RECORD_FIELDS]]
    typed = ", ".join(f'"{f.column}" {f.db_type(connection)}' for f in fields)
    names = ", ".join(f'"{f.column}"' for f in fields)
    updates = ", ".join(f'"{f.column}" = EXCLUDED."{f.column}"' for f in fields[1:])
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {meta.db_table} ({names}) "  # noqa: S608 - names from the model
            f"SELECT {names} FROM jsonb_to_recordset(%s::jsonb) AS v({typed}) "
            f"ON CONFLICT (job_id) DO UPDATE SET {updates}",
            [json.dumps(values, default=str)],
        )


def _record(job: Job, namespace: str, obj: dict[str, Any], uid: str) -> None:
    _records_upsert([(job, namespace, obj, uid)])


def _observe_submitted(jobs: list[Job]) -> None:
    """Admission → created latency for the dashboards' histogram (optional, never fatal)."""
    try:
        from dashboards.metrics import observe_dispatch
    except ImportError:  # pragma: no cover - the dashboards app is part of the project
        return
    for job in jobs:
        try:
            observe_dispatch(cluster=str(job.cluster), admitted_at=job.admitted_at)
        except Exception:  # metrics must never fail a dispatch
            log.debug("could not observe dispatch latency", exc_info=True)


def _delete_quietly(job: Job, namespace: str, name: str, uid: str | None = None) -> None:
    """Best effort: remove an object this dispatch made for a job that moved on."""
    try:
        client = cluster_client(job.cluster)  # type: ignore[arg-type]
        client.delete_job(namespace, name, uid=uid)
    except (KubeError, ClusterUnavailable) as exc:
        if not (isinstance(exc, KubeError) and exc.not_found):
            log.warning("could not delete %s/%s of job %s: %s", namespace, name, job.pk, exc)


def job_dispatch(*, job_id: int) -> Outcome:
    """Create the Volcano Job of an ADMITTED job and move it to SUBMITTED."""
    job = _load(job_id)
    if job is None or job.state != JobState.ADMITTED:
        return Outcome(done=True, message="not admitted")
    # The attempt counter lives on the row, so it survives worker restarts and redeliveries.
    if not Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).update(
        dispatch_attempts=F("dispatch_attempts") + 1, dispatch_next_at=timezone.now()
    ):
        return Outcome(done=True, message="not admitted")
    attempt = job.dispatch_attempts + 1
    if job.cluster is None or job.gpu_model is None:
        return _fail(job, "DispatchFailed", "The job was admitted without a cluster or GPU model.")
    try:
        namespace, manifest = job_manifest(job)
    except volcano.ManifestError as exc:
        return _fail(job, "InvalidJob", f"The job cannot run as a Volcano Job: {exc}")
    name, uid = manifest["metadata"]["name"], submission_uid(job)
    try:
        client = cluster_client(job.cluster)
    except ClusterUnavailable as exc:
        return _retry(job, attempt, f"cluster {job.cluster.name} is unavailable: {exc}")
    try:
        created = client.create_job(namespace, manifest)
    except KubeError as exc:
        if exc.already_exists:
            return _adopt_or_conflict(job, attempt, namespace, name, uid)
        if exc.transient:
            return _retry(job, attempt, exc.message, exc.retry_after)
        if repairable(exc, namespace) and not _queue_repaired(job):
            _queue_repair(job, exc.message, namespace)
            return Outcome(done=False, message=exc.message, retry_in=1.0)
        return _fail(job, "SubmitRejected", f"The cluster refused the job: {exc.message}")
    return _submitted(job, namespace, created, uid, adopted=False)


QUEUE_REPAIR = "QueueRepair"


def _queue_repaired(job: Job) -> bool:
    """Whether this admission already had its team's namespace and queue repaired once (then a
    refusal for a missing or closed queue is final: retrying cannot fix what a repair did not,
    e.g. a team with no quota it could use on this cluster has no queue to sync)."""
    events = JobEvent.objects.filter(job_id=job.pk, reason=QUEUE_REPAIR)
    if job.admitted_at is not None:
        events = events.filter(created_at__gte=job.admitted_at)
    return events.exists()


def _queue_repair(job: Job, problem: str, namespace: str) -> None:
    """Make the job namespace again if the cluster lacks it, and sync the cluster's queues
    (which also makes every team's namespace), because the create was refused for want of
    either."""
    from clusters.queues import queues_sync

    assert job.cluster is not None
    job_event_record(
        job,
        QUEUE_REPAIR,
        f"{problem}; making namespace {namespace} and the team queues of {job.cluster} again "
        "where missing, and trying again.",
    )
    try:
        trouble = job_namespace_ensure(cluster_client(job.cluster), namespace)
        if trouble:
            log.warning("job %s: %s", job.pk, trouble)
        queues_sync(cluster=job.cluster)
    except Exception:  # the retry that follows reports the real problem
        log.warning("repair of %s failed during dispatch", job.cluster.name, exc_info=True)


def _adopt_or_conflict(job: Job, attempt: int, namespace: str, name: str, uid: str) -> Outcome:
    try:
        existing = cluster_client(job.cluster).get_job(namespace, name)  # type: ignore[arg-type]
    except ClusterUnavailable as exc:
        return _retry(job, attempt, f"cluster {job.cluster} is unavailable: {exc}")
    except KubeError as exc:
        if exc.not_found:  # deleted between our create and our read: try again, bounded
            return _retry(job, attempt, f"the Volcano Job {namespace}/{name} went away")
        return _retry(job, attempt, exc.message, exc.retry_after)
    meta = existing.get("metadata") or {}
    theirs = (meta.get("annotations") or {}).get(volcano.ANNOTATION_SUBMISSION_UID)
    if theirs == uid:
        return _submitted(job, namespace, existing, uid, adopted=True)
    if meta.get("deletionTimestamp"):
        return _retry(job, attempt, f"an earlier Volcano Job {name} is still being deleted")
    job_event_record(
        job,
        "VolcanoJobConflict",
        f"A Volcano Job named {namespace}/{name} already exists and was not created by this "
        f"dispatch (submission UID {theirs or 'missing'}, expected {uid}); it was left alone.",
    )
    return _fail(
        job,
        "VolcanoJobConflict",
        f"A different Volcano Job named {namespace}/{name} already exists on {job.cluster}; "
        "the portal never overwrites it.",
    )


def _submitted(
    job: Job, namespace: str, obj: dict[str, Any], uid: str, *, adopted: bool
) -> Outcome:
    name = obj["metadata"]["name"]
    # The record goes first, so whoever sees the job SUBMITTED finds it. An adopted object may
    # already have one from the attempt that created it (with facts recorded since): keep it.
    if (
        not adopted
        or not VolcanoJobRecord.objects.filter(job_id=job.pk, submission_uid=uid).exists()
    ):
        _record(job, namespace, obj, uid)
    won = job_transition(
        job_id=job.pk,
        expected=JobState.ADMITTED,
        to=JobState.SUBMITTED,
        reason="Submitted" if not adopted else "Adopted",
        message=(
            f"Volcano Job {namespace}/{name} created on {job.cluster}."
            if not adopted
            else f"Volcano Job {namespace}/{name} already existed from an earlier attempt; adopted."
        ),
        updates={"volcano_job_name": name},
    )
    if won:
        _observe_submitted([job])
        return Outcome(done=True, message="submitted")
    # Cancelled or preempted while we created it: leave nothing behind (a duplicate delivery
    # that lost to another worker's success is the one case where the object stays).
    current = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
    if current not in (JobState.SUBMITTED, JobState.RUNNING):
        _delete_quietly(job, namespace, name, uid=str(obj["metadata"].get("uid") or "") or None)
    return Outcome(done=True, message=f"job is {current}")


# ---------------------------------------------------------------------------------------------
# Dispatch in batches (what the scheduling cycle's admissions use)
# ---------------------------------------------------------------------------------------------
_pools: dict[int, tuple[int, ThreadPoolExecutor]] = {}
_pools_lock = threading.Lock()


def _create_pool(cluster: Cluster) -> ThreadPoolExecutor:
    """The process's threads for creates in flight to one cluster, reused by every batch.

    One pool per cluster, sized by that cluster's own ``creates_in_flight``: a slow cluster
    then holds only its own threads, and a cluster allowed more creates gets them (its
    client's semaphore bounds what reaches it either way). Threads are not free to start, so
    pools live as long as the process; a changed limit replaces the cluster's pool.
    """
    size = max(1, cluster.creates_in_flight or settings.GPUPOOL_CLUSTER_CREATES_IN_FLIGHT)
    with _pools_lock:
        sized = _pools.get(cluster.pk)
        if sized is not None and sized[0] == size:
            return sized[1]
        if sized is not None:
            sized[1].shutdown(wait=False)  # its threads end once their creates are done
        pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix=f"dispatch-{cluster.pk}")
        _pools[cluster.pk] = (size, pool)
        return pool


@dataclass(frozen=True)
class _Attempt:
    job: Job
    namespace: str
    manifest: dict[str, Any]
    client: Any


def _create(item: _Attempt) -> dict[str, Any] | Exception:
    """The created object, or what went wrong: one job's surprise must not sink the batch."""
    try:
        return dict(item.client.create_job(item.namespace, item.manifest))
    except Exception as exc:  # KubeError, or anything unforeseen: decided per job below
        return exc


def _submit(item: _Attempt) -> Future[dict[str, Any] | Exception]:
    try:
        return _create_pool(item.job.cluster).submit(_create, item)  # type: ignore[arg-type]
    except RuntimeError:  # another batch just replaced the pool (its limit changed): run here
        done: Future[dict[str, Any] | Exception] = Future()
        done.set_result(_create(item))
        return done


def _creates_run(work: list[_Attempt]) -> list[dict[str, Any] | Exception]:
    """Run the creates concurrently, each on its cluster's pool; results in ``work``'s order."""
    futures = [_submit(item) for item in work]
    return [future.result() for future in futures]


def _refused_in_batch(
    item: _Attempt, exc: KubeError, repaired: set[tuple[int, str]], later: dict[int, float]
) -> None:
    """Decide what a create the cluster refused in a batch needs, in ``later``.

    Overload and network trouble back off here, honouring Retry-After, exactly as the one-job
    path would (handing them straight to it would send the same create again at once). A
    missing team queue or namespace gets one repair per cluster, namespace and batch. The rest
    (409s, validation)
    goes to the one-job path now, which reads the 409 or fails the job with the API's words.
    """
    job = item.job
    if exc.transient:
        outcome = _retry(job, job.dispatch_attempts + 1, exc.message, exc.retry_after)
        if outcome.retry_in is not None:
            later[job.pk] = outcome.retry_in
        return
    if repairable(exc, item.namespace):
        key = (job.cluster_id, item.namespace)
        if key not in repaired:
            repaired.add(key)  # type: ignore[arg-type]
            _queue_repair(job, exc.message, item.namespace)
        else:
            job_event_record(
                job, QUEUE_REPAIR, f"{exc.message}; the namespace and team queues were repaired."
            )
        later[job.pk] = 1.0  # a queue the sync just opened may take a moment to be served
        return
    later[job.pk] = 0.0


def job_dispatch_batch(*, job_ids: list[int]) -> dict[int, float]:
    """Dispatch many ADMITTED jobs with a few statements for the lot.

    Returns the jobs to hand to the one-job path (:func:`job_dispatch`), which owns 409s and
    failures, each with the seconds to wait first (a backoff when the cluster asked for one).

    The happy path is what costs at scale: one query loads the jobs, one bumps their attempt
    counters, the creates run concurrently (bounded by the cluster's creates in flight and
    rate limit), then one bulk compare-and-set moves the created ones to SUBMITTED and one
    statement records them. Anything unusual goes to the careful path one job at a time.
    """
    from portal.jobs.state import Change, jobs_transition_bulk

    jobs = list(_jobs().defer(*_NOT_FOR_THE_BATCH).filter(pk__in=job_ids, state=JobState.ADMITTED))
    if not jobs:
        return {}
    Job.objects.filter(pk__in=[j.pk for j in jobs], state=JobState.ADMITTED).update(
        dispatch_attempts=F("dispatch_attempts") + 1, dispatch_next_at=timezone.now()
    )
    later: dict[int, float] = {}
    work: list[_Attempt] = []
    for job in jobs:
        if job.cluster is None or job.gpu_model is None:
            later[job.pk] = 0.0
            continue
        try:
            namespace, manifest = job_manifest(job)
            client = cluster_client(job.cluster)
        except (volcano.ManifestError, ClusterUnavailable):
            later[job.pk] = 0.0
            continue
        work.append(_Attempt(job, namespace, manifest, client))

    done: list[tuple[Job, str, dict[str, Any], str]] = []
    repaired: set[tuple[int, str]] = set()
    for item, result in zip(work, _creates_run(work), strict=True):
        if isinstance(result, KubeError):
            _refused_in_batch(item, result, repaired, later)
        elif isinstance(result, Exception):
            log.warning("create of job %s failed unexpectedly", item.job.pk, exc_info=result)
            later[item.job.pk] = 1.0  # the one-job path tries again, and reports what it sees
        else:
            done.append((item.job, item.namespace, result, submission_uid(item.job)))
    if done:
        # Records and transition commit together: one WAL flush per batch, and no moment where
        # a record exists for a job still ADMITTED (the reconcile would adopt it anyway).
        with transaction.atomic():
            _records_upsert(done)
            won = jobs_transition_bulk(
                changes=[
                    Change(
                        job_id=job.pk,
                        updates={"volcano_job_name": obj["metadata"]["name"]},
                        message=f"Volcano Job {ns}/{obj['metadata']['name']} created on "
                        f"{job.cluster}.",
                    )
                    for job, ns, obj, _ in done
                ],
                expected=JobState.ADMITTED,
                to=JobState.SUBMITTED,
                reason="Submitted",
            )
        _observe_submitted([job for job, *_ in done if job.pk in won])
        for job, namespace, obj, _ in done:
            if job.pk in won:
                continue
            current = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
            if current == JobState.ADMITTED:
                later[job.pk] = 0.0  # row locked by someone else: try again alone
            elif current not in (JobState.SUBMITTED, JobState.RUNNING):
                _delete_quietly(job, namespace, obj["metadata"]["name"], obj["metadata"].get("uid"))
    return later


# ---------------------------------------------------------------------------------------------
# Cancel and eviction
# ---------------------------------------------------------------------------------------------
def _where(job: Job) -> tuple[str, str]:
    record = VolcanoJobRecord.objects.filter(job_id=job.pk).first()
    if record is not None:
        return record.namespace, record.name
    assert job.cluster is not None
    return (
        cluster_job_namespace(job.cluster, job.team.slug),
        volcano.volcano_job_name(str(job.public_id)),
    )


def _remove(job: Job, *, attempt: int) -> Outcome | None:
    """Delete the job's Volcano Job and confirm it is gone; None once it is."""
    if job.cluster is None:
        return None
    namespace, name = _where(job)
    try:
        client = cluster_client(job.cluster)
        try:
            client.delete_job(namespace, name)
        except KubeError as exc:
            if not exc.not_found:
                raise
        try:
            leftover = client.get_job(namespace, name)
        except KubeError as exc:
            if not exc.not_found:
                raise
            leftover = None
    except ClusterUnavailable as exc:
        return Outcome(done=False, message=str(exc), retry_in=backoff_seconds(attempt))
    except KubeError as exc:
        return Outcome(
            done=False, message=exc.message, retry_in=backoff_seconds(attempt, exc.retry_after)
        )
    if leftover is not None:
        return Outcome(done=False, message="still being deleted", retry_in=backoff_seconds(attempt))
    VolcanoJobRecord.objects.filter(job_id=job.pk).update(deleted_at=timezone.now())
    return None


def job_cancel_on_cluster(*, job_id: int, attempt: int = 1) -> Outcome:
    """Delete a CANCELLING job's Volcano Job, then mark it CANCELLED."""
    job = _load(job_id)
    if job is None or job.state != JobState.CANCELLING:
        return Outcome(done=True, message="not cancelling")
    pending = _remove(job, attempt=attempt)
    if pending is not None:
        return pending
    cancelling_end(  # CANCELLED, or FAILED with the reason the portal stopped the job for
        job_id=job.pk,
        message="The Volcano Job was deleted." if job.cluster else "Nothing was running.",
    )
    return Outcome(done=True, message="cancelled")


def preemption_message(job: Job) -> str:
    """The message the scheduler wrote when it decided to preempt this job."""
    event = (
        JobEvent.objects.filter(job_id=job.pk, to_state=JobState.PREEMPTING)
        .exclude(from_state=JobState.PREEMPTING)
        .order_by("-created_at", "-id")
        .first()
    )
    return event.message if event else ""


def job_evict(*, job_id: int, attempt: int = 1) -> Outcome:
    """Delete a PREEMPTING job's Volcano Job, then requeue it (reason Preempted)."""
    job = _load(job_id)
    if job is None or job.state != JobState.PREEMPTING:
        return Outcome(done=True, message="not preempting")
    pending = _remove(job, attempt=attempt)
    if pending is not None:
        return pending
    preempting_end(job_id=job.pk)  # QUEUED: Preempted, or Requeued by the portal's own stop
    return Outcome(done=True, message="requeued")
