"""Job writers: submit (one or a batch) and cancel. Views, the API and tasks call only these."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, fields
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, connections, models, router, transaction
from django.db.models import Field, Model
from django.db.models.expressions import DatabaseDefault
from django.utils import timezone

from portal.access import AnyUser, require_cancel, team_for_submit
from portal.errors import ApplicationError, Conflict
from portal.jobs.spec import JobSpec, SpecError, SpecLimits, parse_job_spec
from portal.jobs.state import job_transition
from portal.models import TERMINAL_STATES, Job, JobEvent, JobState, Team
from scheduling.catalog import catalog_entries

# Called on commit after jobs are queued or freed (the scheduling cycle hooks in here).
on_jobs_changed: list[Callable[[], None]] = []
# Called on commit with the job's id once it is CANCELLING (the clusters side deletes the
# Volcano Job and then marks it CANCELLED).
on_job_cancelling: list[Callable[[int], None]] = []


def _notify_jobs_changed() -> None:
    for hook in on_jobs_changed:
        transaction.on_commit(hook)


@dataclass(frozen=True)
class SubmitResult:
    job: Job
    created: bool


_largest_node: tuple[float, int | None] | None = None
LARGEST_NODE_CACHE_SECONDS = 10.0


def _largest_node_gpus() -> int | None:
    """The largest GPU node of any enabled cluster, cached per process like the catalog (read
    fresh inside a transaction, so a test's own inventory is seen and never cached)."""
    global _largest_node
    from clusters.selectors import largest_node_gpus

    if connection.in_atomic_block:
        return largest_node_gpus()
    now = time.monotonic()
    if _largest_node is None or now - _largest_node[0] > LARGEST_NODE_CACHE_SECONDS:
        _largest_node = (now, largest_node_gpus())
    return _largest_node[1]


def submit_limits() -> SpecLimits:
    """The setting bounds GPUs per replica; once clusters report nodes, so does the largest
    node (a replica's GPUs must all sit on one node)."""
    bound = settings.GPUPOOL_MAX_GPUS_PER_REPLICA
    largest = _largest_node_gpus()
    return SpecLimits(
        max_gpus_per_replica=min(bound, largest) if largest else bound,
        max_replicas=settings.GPUPOOL_MAX_REPLICAS,
        max_retry=settings.GPUPOOL_MAX_RETRY,
    )


_SPEC_FIELDS = tuple(f.name for f in fields(JobSpec))


def _fingerprint(spec: JobSpec) -> str:
    """A stable digest of what was asked, to tell a retry from a reused Idempotency-Key.

    Stored with every job, so it must never change for the same spec: this is the JSON of
    ``dataclasses.asdict(spec)``, built without asdict's deep copy (a fifth of a batch's CPU).
    """
    canonical = json.dumps(
        {name: getattr(spec, name) for name in _SPEC_FIELDS}, sort_keys=True, default=str
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _new_job(*, spec: JobSpec, team: Team, user: AnyUser, key: str | None, now: dt.datetime) -> Job:
    return Job(
        team=team,
        owner=user,  # the object, not its id: serializing the new job then needs no query
        state=JobState.QUEUED,
        state_changed_at=now,
        submitted_at=now,
        idempotency_key=key,
        request_fingerprint=_fingerprint(spec),
        **spec.as_model_fields(),
    )


def _submitted_event(job: Job, user: AnyUser, now: dt.datetime) -> JobEvent:
    return JobEvent(
        job=job,
        created_at=now,
        from_state="",
        to_state=JobState.QUEUED,
        reason="Submitted",
        message=f"Submitted by {user.get_username()}: {job.replicas} × {job.gpus_per_replica} GPU.",
        actor_id=user.pk,
    )


def _replay(*, user: AnyUser, key: str, spec: JobSpec) -> Job | None:
    """The job an earlier request with this key created, if any; a different body is an error."""
    job = Job.objects.filter(owner_id=user.pk, idempotency_key=key).first()
    if job is not None and job.request_fingerprint != _fingerprint(spec):
        raise Conflict(
            "This Idempotency-Key was already used for a different request.",
            fields={"Idempotency-Key": ["Reused with a different body; use a new key."]},
        )
    return job


def _validate_key(key: str | None) -> str | None:
    if key is None:
        return None
    key = key.strip()
    if not key or len(key) > 200 or not key.isprintable():
        raise ApplicationError(
            "Invalid Idempotency-Key.",
            fields={"Idempotency-Key": ["Use 1–200 printable characters."]},
        )
    return key


# Field types whose attribute value psycopg sends as it is, as their get_db_prep_save would
# for the values a JobSpec and the model defaults produce (str, int, bool, float, UUID, aware
# datetime, None). JSON goes through the backend's adapter; any other type through the field.
_NATIVE_ON_POSTGRESQL = (
    models.CharField,
    models.TextField,
    models.IntegerField,
    models.BooleanField,
    models.FloatField,
    models.UUIDField,
    models.DateTimeField,
    models.ForeignKey,
)


Reader = Callable[[Model, Any], Any]


def _computes_on_save(f: Field[Any, Any]) -> bool:
    """Whether ``f.pre_save`` may change the value (auto_now and the like), not just read it."""
    if isinstance(f, models.DateField):  # DateField overrides pre_save only for these two
        return bool(f.auto_now or f.auto_now_add)
    return type(f).pre_save is not Field.pre_save


def _reader(f: Field[Any, Any], vendor: str) -> Reader:
    """How to get ``f``'s database value out of an unsaved instance, given a connection."""
    if _computes_on_save(f):

        def computed(obj: Model, conn: Any) -> Any:
            return f.get_db_prep_save(f.pre_save(obj, True), conn)

        return computed
    if vendor == "postgresql" and isinstance(f, models.JSONField):

        def json_value(obj: Model, conn: Any) -> Any:
            value = getattr(obj, f.attname)
            return None if value is None else conn.ops.adapt_json_value(value, f.encoder)

        return json_value
    if vendor == "postgresql" and isinstance(f, _NATIVE_ON_POSTGRESQL):

        def native(obj: Model, conn: Any) -> Any:
            return getattr(obj, f.attname)

        return native

    def prepared(obj: Model, conn: Any) -> Any:
        return f.get_db_prep_save(getattr(obj, f.attname), conn)

    return prepared


@functools.cache
def _row_format(
    model: type[Model], vendor: str, skip: str = ""
) -> tuple[list[Field[Any, Any]], list[Reader]]:
    """The columns ``Model.save()`` would insert for ``model`` (the auto primary key, and
    ``skip``, left out) and a reader per column.

    ``get_db_prep_save`` per field and row is most of the CPU of inserting a batch, and on
    PostgreSQL it returns most fields' values unchanged; those are read as attributes.
    """
    meta = model._meta
    columns = [f for f in meta.local_concrete_fields if f is not meta.auto_field]
    columns = [f for f in columns if f.attname != skip]
    return columns, [_reader(f, vendor) for f in columns]


def _insert_values(obj: Model, connection: Any, *, skip: str = "") -> tuple[list[str], list[Any]]:
    """Quoted columns and prepared values of an unsaved row, as ``Model.save()`` would insert
    them (``pre_save`` applied, the auto primary key and database defaults left out)."""
    columns, values = [], []
    fields_, readers = _row_format(type(obj), connection.vendor, skip)
    for f, read in zip(fields_, readers, strict=True):
        value = read(obj, connection)
        if isinstance(value, DatabaseDefault):
            continue
        columns.append(connection.ops.quote_name(f.column))
        values.append(value)
    return columns, values


def _insert_job_with_event(job: Job, event: JobEvent) -> None:
    """INSERT a job and its first event in one statement, a data-modifying CTE.

    One round trip, atomic by itself: ``save()`` twice inside ``atomic()`` costs four (BEGIN,
    two INSERTs, COMMIT) and the ORM's save machinery twice, which a submit pays on every
    request. Inside a caller's transaction it runs in a savepoint, so a lost race on the
    Idempotency-Key leaves that transaction usable for the replay.
    """
    alias = router.db_for_write(Job)
    connection = connections[alias]
    if connection.vendor != "postgresql":
        # SQLite (the demo) has no data-modifying CTEs: two plain inserts in one transaction.
        with transaction.atomic(using=alias):
            job.save(force_insert=True, using=alias)
            event.job = job
            event.save(force_insert=True, using=alias)
        return
    job_columns, job_values = _insert_values(job, connection)
    event_columns, event_values = _insert_values(event, connection, skip="job_id")
    # Only names and placeholders go into the text; every value is a parameter.
    qn = connection.ops.quote_name
    pk, job_fk = qn(Job._meta.pk.column), qn(JobEvent._meta.get_field("job").column)
    job_table, event_table = qn(Job._meta.db_table), qn(JobEvent._meta.db_table)
    columns, marks = ", ".join(job_columns), ", ".join(["%s"] * len(job_values))
    insert_job = f"INSERT INTO {job_table} ({columns}) VALUES ({marks}) RETURNING {pk}"  # noqa: S608
    columns, marks = ", ".join(event_columns), ", ".join(["%s"] * len(event_values))
    insert_event = f"INSERT INTO {event_table} ({job_fk}, {columns})"
    event_row = f"VALUES ((SELECT {pk} FROM j), {marks}) RETURNING {job_fk}"  # noqa: S608
    sql = f"WITH j AS ({insert_job}) {insert_event} {event_row}"
    savepoint = transaction.atomic(using=alias) if connection.in_atomic_block else nullcontext()
    with savepoint, connection.cursor() as cursor:
        cursor.execute(sql, [*job_values, *event_values])
        (job.pk,) = cursor.fetchone()
    for obj in (job, event):
        obj._state.adding, obj._state.db = False, alias
    event.job = job


# Transaction-level advisory locks (two int4 keys: this namespace, the team id) serialize the
# submits of a team that has a queue limit, so two at once cannot both take its last place.
QUEUE_LIMIT_LOCK_NAMESPACE = 0x67_70_71  # "gpq"


def _queue_limit(team: Team) -> int | None:
    """The team's ``max_queued_jobs``, read alongside its role by ``team_for_submit``."""
    return getattr(team, "max_queued_jobs", None)


def _lock_team_queue(team: Team, alias: str) -> None:
    """Hold the team's queue-limit lock until the transaction ends (PostgreSQL).

    SQLite (the demo) needs none: it has one writer at a time, and a transaction that read the
    count and then finds another writer's commit fails with "database is locked" rather than
    overshooting.
    """
    connection = connections[alias]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)", [QUEUE_LIMIT_LOCK_NAMESPACE, team.pk]
            )


def _refuse_beyond_queue_limit(team: Team, adding: int, alias: str, field: str = "team") -> None:
    """Refuse a submit that would leave ``team`` with more QUEUED jobs than its limit.

    Counts at most ``limit`` rows (the ``(team, state)`` index, cut short by LIMIT), so a team
    with a million queued jobs costs no more to check than one at its limit.
    """
    limit = _queue_limit(team)
    if limit is None:
        return
    queued = Job.objects.using(alias).filter(team_id=team.pk, state=JobState.QUEUED)[:limit].count()
    if queued + adding <= limit:
        return
    asked = "this job" if adding == 1 else f"these {adding} jobs"
    raise Conflict(
        f"{team.name} already has {queued} queued job{'s' * (queued != 1)} and may have at most "
        f"{limit}; {asked} would exceed it. Wait for queued jobs to start, or cancel some.",
        fields={field: [f"The team's queue is full ({queued} of {limit} queued jobs)."]},
    )


def job_submit(
    *,
    user: AnyUser,
    data: Mapping[str, Any],
    idempotency_key: str | None = None,
    now: dt.datetime | None = None,
) -> SubmitResult:
    """Validate and queue one job; with an Idempotency-Key, a repeat returns the first job.

    Nothing is stored when validation fails. A repeated key is found by the unique constraint
    on ``(owner, idempotency_key)`` rather than by a look-up first, so a first submission (the
    usual case) costs no extra query, and two concurrent requests with the same key race on
    that constraint: the loser's insert fails as a whole and it returns the winner's job.
    """
    key = _validate_key(idempotency_key)
    spec = parse_job_spec(data, catalog=catalog_entries(), limits=submit_limits())
    team = team_for_submit(user, spec.team)
    if key is not None and _queue_limit(team) is not None:
        # A retry of a job that was created must read as such even once the queue is full.
        existing = _replay(user=user, key=key, spec=spec)
        if existing is not None:
            return SubmitResult(existing, created=False)
    now = now or timezone.now()
    job = _new_job(spec=spec, team=team, user=user, key=key, now=now)
    try:
        _insert_within_queue_limit(job, _submitted_event(job, user, now), team)
    except IntegrityError:
        if key is None:
            raise
        existing = _replay(user=user, key=key, spec=spec)
        if existing is None:
            raise
        return SubmitResult(existing, created=False)
    _notify_jobs_changed()  # on commit: at once in autocommit, else with the caller's commit
    return SubmitResult(job, created=True)


def _insert_within_queue_limit(job: Job, event: JobEvent, team: Team) -> None:
    """Insert the job unless its team's queue is full; a team without a limit pays nothing."""
    if _queue_limit(team) is None:
        _insert_job_with_event(job, event)
        return
    alias = router.db_for_write(Job)
    with transaction.atomic(using=alias):
        _lock_team_queue(team, alias)
        _refuse_beyond_queue_limit(team, 1, alias)
        _insert_job_with_event(job, event)


def _parse_batch(items: Sequence[Any]) -> list[JobSpec]:
    limit = settings.GPUPOOL_BATCH_MAX
    if not isinstance(items, list | tuple) or not items:
        raise ApplicationError(
            "Expected a non-empty list.", fields={"jobs": ["Give 1 or more jobs."]}
        )
    if len(items) > limit:
        raise ApplicationError(
            f"At most {limit} jobs per batch.", fields={"jobs": [f"At most {limit} jobs."]}
        )
    catalog, limits = catalog_entries(), submit_limits()
    specs: list[JobSpec] = []
    errors: dict[str, list[str]] = {}
    for i, item in enumerate(items):
        try:
            specs.append(parse_job_spec(item, catalog=catalog, limits=limits))
        except SpecError as exc:
            for name, messages in exc.fields.items():
                errors[f"jobs[{i}].{name}"] = messages
    if errors:
        raise ApplicationError(
            f"{len({k.split('.')[0] for k in errors})} job(s) are invalid; none were submitted.",
            fields=errors,
        )
    return specs


def job_submit_batch(
    *,
    user: AnyUser,
    items: Sequence[Any],
    idempotency_key: str | None = None,
    now: dt.datetime | None = None,
) -> tuple[list[Job], bool]:
    """Queue up to GPUPOOL_BATCH_MAX jobs all-or-nothing; (jobs, created).

    Job *i* of a keyed batch carries the key ``<key>#<i>``, so a retried batch returns the same
    jobs, and a concurrent duplicate loses on the unique constraint as a whole.
    """
    key = _validate_key(idempotency_key)
    specs = _parse_batch(items)
    teams: dict[str, Team] = {}
    for i, spec in enumerate(specs):
        if spec.team not in teams:
            try:
                teams[spec.team] = team_for_submit(user, spec.team)
            except ApplicationError as exc:
                exc.fields = {f"jobs[{i}].{k}": v for k, v in exc.fields.items()}
                raise
    keys = [f"{key}#{i}" for i in range(len(specs))] if key else [None] * len(specs)
    if key is not None:
        existing = _replay_batch(user=user, keys=keys, specs=specs)
        if existing is not None:
            return existing, False
    now = now or timezone.now()
    jobs = [
        _new_job(spec=s, team=teams[s.team], user=user, key=k, now=now)
        for s, k in zip(specs, keys, strict=True)
    ]
    alias = router.db_for_write(Job)
    try:
        with transaction.atomic(using=alias):
            _refuse_batch_beyond_queue_limits(specs, teams, alias)
            _insert_jobs_with_events(jobs, [_submitted_event(j, user, now) for j in jobs])
            _notify_jobs_changed()
    except IntegrityError:
        if key is None:
            raise
        existing = _replay_batch(user=user, keys=keys, specs=specs)
        if existing is None:
            raise
        return existing, False
    return jobs, True


def _refuse_batch_beyond_queue_limits(
    specs: Sequence[JobSpec], teams: Mapping[str, Team], alias: str
) -> None:
    """Check each limited team of a batch against what the batch adds to it, all or nothing.

    Locks are taken in team-id order, so two batches over the same teams cannot deadlock.
    """
    adding: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, spec in enumerate(specs):
        adding[spec.team] = adding.get(spec.team, 0) + 1
        first.setdefault(spec.team, i)
    limited = sorted(
        (teams[slug] for slug in adding if _queue_limit(teams[slug]) is not None),
        key=lambda t: t.pk,
    )
    for team in limited:
        _lock_team_queue(team, alias)
        _refuse_beyond_queue_limit(
            team, adding[team.slug], alias, field=f"jobs[{first[team.slug]}].team"
        )


def _copy_rows(connection: Any, cursor: Any, model: type[Model], objs: Sequence[Model]) -> None:
    """COPY unsaved instances into ``model``'s table, their primary keys included if set."""
    qn = connection.ops.quote_name
    columns, readers = _row_format(model, connection.vendor)
    with_pk = objs[0].pk is not None
    names = [qn(model._meta.pk.column)] * with_pk + [qn(f.column) for f in columns]
    sql = f"COPY {qn(model._meta.db_table)} ({', '.join(names)}) FROM STDIN"
    with cursor.cursor.copy(sql) as copy:
        for obj in objs:
            row = [read(obj, connection) for read in readers]
            copy.write_row([obj.pk, *row] if with_pk else row)


def _insert_jobs_with_events(jobs: list[Job], events: list[JobEvent]) -> None:
    """Insert a batch's jobs and their first events; call inside a transaction.

    On PostgreSQL: the jobs' ids from their sequence in one query, then one COPY per table,
    which costs a fraction of the CPU of ``bulk_create`` (which prepares every value of every
    row through its field and has psycopg quote them all into one statement). Elsewhere, or
    once a column has a database default (COPY cannot say DEFAULT per row), ``bulk_create``.
    """
    alias = router.db_for_write(Job)
    connection = connections[alias]
    copyable = connection.vendor == "postgresql" and not any(
        f.has_db_default() for m in (Job, JobEvent) for f in m._meta.local_concrete_fields
    )
    if not copyable:
        Job.objects.using(alias).bulk_create(jobs)
        for job, event in zip(jobs, events, strict=True):
            event.job = job
        JobEvent.objects.using(alias).bulk_create(events)
        return
    table = connection.ops.quote_name(Job._meta.db_table)
    with connection.cursor() as cursor, connection.wrap_database_errors:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [table, Job._meta.pk.column, len(jobs)],
        )
        for job, event, (job_id,) in zip(jobs, events, cursor.fetchall(), strict=True):
            job.pk = job_id
            event.job = job
        _copy_rows(connection, cursor, Job, jobs)
        _copy_rows(connection, cursor, JobEvent, events)
    for job in jobs:
        job._state.adding, job._state.db = False, alias


def _replay_batch(
    *, user: AnyUser, keys: list[str | None], specs: list[JobSpec]
) -> list[Job] | None:
    found = {
        j.idempotency_key: j for j in Job.objects.filter(owner_id=user.pk, idempotency_key__in=keys)
    }
    if not found:
        return None
    if len(found) != len(keys) or any(
        found[k].request_fingerprint != _fingerprint(s) for k, s in zip(keys, specs, strict=True)
    ):
        raise Conflict(
            "This Idempotency-Key was already used for a different batch.",
            fields={"Idempotency-Key": ["Reused with a different body; use a new key."]},
        )
    return [found[k] for k in keys]


def job_cancel(*, job: Job, by: AnyUser) -> Job:
    """Cancel a job: a queued one at once, one holding a reservation or a cluster object via
    CANCELLING (the clusters side deletes the Volcano Job, then marks it CANCELLED).

    Cancelling a finished job is a Conflict, not a silent success; cancelling one that is
    already being cancelled returns it unchanged.
    """
    require_cancel(by, job)
    for _ in range(5):  # the scheduler may move the job between our read and our write
        job.refresh_from_db(fields=["state"])
        if job.state in TERMINAL_STATES:
            raise Conflict(f"Job is already {job.state}; there is nothing to cancel.")
        if job.state == JobState.CANCELLING:
            return job
        if job.state == JobState.PREEMPTING:
            raise Conflict("Job is being preempted and requeued; cancel it again in a moment.")
        to = JobState.CANCELLED if job.state == JobState.QUEUED else JobState.CANCELLING
        if job_transition(
            job_id=job.pk,
            expected=job.state,
            to=to,
            reason="CancelRequested",
            message=f"Cancelled by {by.get_username()}.",
            actor_id=by.pk,
        ):
            if to == JobState.CANCELLED:
                _notify_jobs_changed()
            else:
                for hook in on_job_cancelling:
                    transaction.on_commit(lambda h=hook, pk=job.pk: h(pk))
            job.refresh_from_db()
            return job
    raise Conflict("Job state keeps changing; try again.")
