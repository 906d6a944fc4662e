"""Job writers: submit (one or a batch) and cancel. Views, the API and tasks call only these."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connections, router, transaction
from django.utils import timezone

from portal import db, hooks
from portal.access import AnyUser, require_cancel, team_for_submit
from portal.cache import ProcessView
from portal.catalog import catalog_entries
from portal.errors import ApplicationError, Conflict, Forbidden, TooManyQueued
from portal.inventory import largest_node_gpus
from portal.jobs.spec import JobSpec, SpecError, SpecLimits, parse_job_spec
from portal.jobs.state import job_transition
from portal.models import TERMINAL_STATES, Job, JobEvent, JobState, Priority, Team


def _notify_jobs_changed() -> None:
    hooks.jobs_changed.fire_on_commit()


@dataclass(frozen=True)
class SubmitResult:
    job: Job
    created: bool


LARGEST_NODE_CACHE_SECONDS = 10.0
_largest_node = ProcessView(
    "largest_node", largest_node_gpus, LARGEST_NODE_CACHE_SECONDS
).forget_on("clusters.Node", "clusters.Cluster")
"""The largest GPU node of any enabled cluster: an inventory change applies to the next submit."""


def submit_limits() -> SpecLimits:
    """The setting bounds GPUs per replica; once clusters report nodes, so does the largest
    node (a replica's GPUs must all sit on one node)."""
    bound = settings.GPUPOOL_MAX_GPUS_PER_REPLICA
    largest = _largest_node.get()
    return SpecLimits(
        max_gpus_per_replica=min(bound, largest) if largest else bound,
        max_replicas=settings.GPUPOOL_MAX_REPLICAS,
        max_retry=settings.GPUPOOL_MAX_RETRY,
    )


_SPEC_FIELDS = tuple(f.name for f in fields(JobSpec))
# Spec fields added after jobs were first fingerprinted, left out while empty so that a job
# stored before them still matches its retry.
_LATER_SPEC_FIELDS = frozenset({"env_from_secrets", "gpu_memory_gib", "gpu_cores_percent"})


def _fingerprint(spec: JobSpec) -> str:
    """A stable digest of what was asked, to tell a retry from a reused Idempotency-Key.

    Stored with every job, so it must never change for the same spec: this is the JSON of
    ``dataclasses.asdict(spec)`` (less later fields while empty), built without asdict's deep
    copy (a fifth of a batch's CPU).
    """
    asked = {name: getattr(spec, name) for name in _SPEC_FIELDS}
    for name in _LATER_SPEC_FIELDS:
        if not asked[name]:
            del asked[name]
    canonical = json.dumps(asked, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _new_job(*, spec: JobSpec, team: Team, user: AnyUser, key: str | None, now: dt.datetime) -> Job:
    return db.model_build(
        Job,
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
    return db.model_build(
        JobEvent,
        job=job,
        created_at=now,
        from_state="",
        to_state=JobState.QUEUED,
        reason="Submitted",
        message=f"Submitted by {user.get_username()}: {job.replicas} × {job.gpu_request_text}.",
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


# A keyed batch stores its jobs under ``<key>#<i>``: a client's own key may not contain the
# separator, so no single submit can name (and so replay or collide with) one job of a batch.
BATCH_KEY_SEPARATOR = "#"


def _validate_key(key: str | None) -> str | None:
    if key is None:
        return None
    key = key.strip()
    if not key or len(key) > 200 or not key.isprintable():
        raise ApplicationError(
            "Invalid Idempotency-Key.",
            fields={"Idempotency-Key": ["Use 1–200 printable characters."]},
        )
    if BATCH_KEY_SEPARATOR in key:
        raise ApplicationError(
            "Invalid Idempotency-Key.",
            fields={
                "Idempotency-Key": [
                    f"{BATCH_KEY_SEPARATOR!r} is reserved: it numbers the jobs of a keyed batch."
                ]
            },
        )
    return key


# Transaction-level advisory locks (two int4 keys: this namespace, the team id) serialize the
# submits of a team that has a queue limit, so two at once cannot both take its last place.
QUEUE_LIMIT_LOCK_NAMESPACE = 0x67_70_71  # "gpq"


@dataclass(frozen=True)
class QueueLimits:
    """The queued-jobs limits a submit to one team is held to; None where there is none.

    Each is the team policy's value where it sets one (0 included: a closed queue), else the
    pool-wide default (``GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM`` / ``_PER_USER``, 0 meaning none).
    """

    team: int | None
    member: int | None
    team_from_policy: bool = True
    member_from_policy: bool = True

    def __bool__(self) -> bool:
        return self.team is not None or self.member is not None


def _default_limit(value: int) -> int | None:
    return value or None  # a setting of 0 switches the default off


def queue_limits(team: Team) -> QueueLimits:
    """The limits for ``team``: its policy's ``max_queued_jobs`` and
    ``max_queued_jobs_per_user`` (read alongside its role by ``team_for_submit``), each falling
    back to its setting when the policy leaves it empty. Settings are read per call, so a
    change (or a test's override) applies at once."""
    on_team = getattr(team, "max_queued_jobs", None)
    on_member = getattr(team, "max_queued_jobs_per_user", None)
    return QueueLimits(
        team=(
            _default_limit(settings.GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM)
            if on_team is None
            else on_team
        ),
        member=(
            _default_limit(settings.GPUPOOL_MAX_QUEUED_JOBS_PER_USER)
            if on_member is None
            else on_member
        ),
        team_from_policy=on_team is not None,
        member_from_policy=on_member is not None,
    )


def _insert_job_with_event(job: Job, event: JobEvent) -> None:
    """INSERT a job and its first event, in one round trip where the database allows."""
    db.insert_with_child(job, event, fk="job")
    job.wait_known_absent()


def _insert_jobs_with_events(jobs: list[Job], events: list[JobEvent]) -> None:
    """Insert a batch's jobs and their first events; call inside a transaction."""
    db.insert_rows(jobs, events, fk="job")
    for job in jobs:
        job.wait_known_absent()


# A limit that is off, in the guard's comparison.
_NO_LIMIT = 2**31 - 1
_ROOM_SQL: dict[tuple[str, bool], str] = {}


def _room_sql(conn: Any, *, team_limited: bool) -> str:
    """The queue check as one query of one row: (whether the submit fits, the team's QUEUED
    jobs, the member's there). Names only, written once per database vendor: building it
    through the ORM on every submit would cost more CPU than running it.

    With a team limit, one scan of the team's queued jobs (the partial index of queued jobs by
    team and owner), cut short at that limit, counts both: a team at its limit is refused
    whatever the member's count, and below it the scan saw every queued job. Without one, the
    scan is the member's own queued jobs, cut short at their limit. Either way a submit reads
    at most a limit's worth of index entries, however long the queue or the member's history.
    """
    key = (conn.vendor, team_limited)
    if key not in _ROOM_SQL:
        qn, meta = conn.ops.quote_name, Job._meta
        table = qn(meta.db_table)
        team, owner, state = (qn(meta.get_field(f).column) for f in ("team", "owner", "state"))
        queued = f"SELECT {owner} FROM {table} WHERE {team} = %s AND {state} = %s"  # noqa: S608
        if not team_limited:
            queued += f" AND {owner} = %s"
        _ROOM_SQL[key] = (
            "SELECT q.n + %s <= %s AND q.own + %s <= %s AS ok, q.n, q.own FROM "  # noqa: S608
            f"(SELECT COUNT(*) AS n, COUNT(*) FILTER (WHERE {owner} = %s) AS own "
            f"FROM ({queued} LIMIT %s) x) q"
        )
    return _ROOM_SQL[key]


def _room(
    team: Team, user: AnyUser, limits: QueueLimits, adding: int, alias: str
) -> tuple[str, list[Any]]:
    """The guard's SQL and parameters for ``adding`` jobs of ``user`` into ``team``."""
    team_limited = limits.team is not None
    sql = _room_sql(connections[alias], team_limited=team_limited)
    on_team = _NO_LIMIT if limits.team is None else limits.team
    on_member = _NO_LIMIT if limits.member is None else limits.member
    scan = [team.pk, JobState.QUEUED.value]
    if not team_limited:
        scan.append(user.pk)
    cut = on_team if team_limited else on_member
    return sql, [adding, on_team, adding, on_member, user.pk, *scan, cut]


def _insert_within_queue_limit(job: Job, event: JobEvent, team: Team, user: AnyUser) -> None:
    """Insert the job unless its team's (or its owner's) queue is full; raise TooManyQueued
    when it is.

    The team's lock, both counts and the insert go to the database as one query string
    (``portal.db.insert_with_child_if``): a submit that fits costs the round trip it costs
    without limits, plus the counting. Only a team whose limits are all off (no policy value,
    its default 0) skips them.
    """
    limits = queue_limits(team)
    if not limits:
        _insert_job_with_event(job, event)
        return
    alias = router.db_for_write(Job)
    guard, params = _room(team, user, limits, 1, alias)
    fits, queued, own = db.insert_with_child_if(
        job, event, fk="job", lock=(QUEUE_LIMIT_LOCK_NAMESPACE, team.pk), guard=guard, params=params
    )
    job.wait_known_absent()
    if not fits:
        _refuse_beyond_queue_limit(team, user, 1, alias, limits, int(queued), int(own))


def _check_batch_queue_limit(
    team: Team, user: AnyUser, adding: int, alias: str, limits: QueueLimits, field: str
) -> None:
    """Take the team's queue lock (until the batch's transaction ends) and count its queues in
    one round trip; refuse when the batch's ``adding`` jobs do not fit."""
    guard, params = _room(team, user, limits, adding, alias)
    fits, queued, own = db.transaction_lock_and_select(
        QUEUE_LIMIT_LOCK_NAMESPACE, team.pk, guard, params, using=alias
    )
    if not fits:
        _refuse_beyond_queue_limit(team, user, adding, alias, limits, int(queued), int(own), field)


def _refuse_beyond_queue_limit(
    team: Team,
    user: AnyUser,
    adding: int,
    alias: str,
    limits: QueueLimits,
    queued: int,
    own: int,
    field: str = "team",
) -> None:
    """Raise the 429 for a submit of ``adding`` jobs that does not fit: the team's limit first
    (its QUEUED jobs), else the member's (their own there), naming the limit, where it comes
    from, how many are queued and what to do."""
    asked = "this job" if adding == 1 else f"these {adding} jobs"
    advice = (
        "Wait for queued jobs to start, or cancel some; a platform admin can raise the limit "
        "in the team's policy."
    )
    if limits.team is not None and queued + adding > limits.team:
        limit, source = limits.team, _limit_source(limits.team_from_policy)
        queued = _all_queued(team, alias) if queued >= limit else queued
        raise TooManyQueued(
            f"{team.name} already has {_queued_jobs(queued)} and may have at most {limit} "
            f"({source}); {asked} would exceed it. {advice}",
            fields={field: [f"The team's queue is full ({queued} of {limit} queued jobs)."]},
        )
    limit, source = limits.member or 0, _limit_source(limits.member_from_policy)
    own = _all_queued(team, alias, owner=user) if own >= limit else own
    raise TooManyQueued(
        f"You already have {_queued_jobs(own)} in {team.name}, where each member may "
        f"have at most {limit} ({source}); {asked} would exceed it. {advice}",
        fields={
            field: [f"Your queue in this team is full ({own} of {limit} queued jobs per member)."]
        },
    )


def _all_queued(team: Team, alias: str, owner: AnyUser | None = None) -> int:
    """Every QUEUED job of the team (or of ``owner`` there), for a refusal's message only: the
    check's count stops at the limit, and a limit lowered below the queue would otherwise
    read as "1 of 1" with 300 waiting."""
    jobs = Job.objects.using(alias).filter(team_id=team.pk, state=JobState.QUEUED)
    return (jobs if owner is None else jobs.filter(owner_id=owner.pk)).count()


def _limit_source(from_policy: bool) -> str:
    return "the team's policy" if from_policy else "the pool's default"


def _queued_jobs(n: int) -> str:
    return f"{n} queued job{'s' * (n != 1)}"


def team_max_priority(team: Team) -> int:
    """The highest priority the team's members may submit: its policy's ``max_priority``
    (read alongside its role by ``team_for_submit``), normal for a team without a policy."""
    top = getattr(team, "max_priority", None)
    return Priority.NORMAL if top is None else int(top)


def _priority_name(value: int) -> str:
    return Priority(value).label if value in Priority.values else str(value)


def _priority_refusal(refused: Sequence[tuple[str, Team, int]]) -> Forbidden:
    """403 naming each (field, team, priority) that asks for more than its team's policy
    allows; the message speaks of the first."""
    _, team, priority = refused[0]
    top, asked = _priority_name(team_max_priority(team)), _priority_name(priority)
    return Forbidden(
        f"{team.name} may submit jobs up to priority {top}; {asked} needs a platform admin to "
        "allow it in the team's policy.",
        fields={
            field: [f"{t.name} may submit up to priority {_priority_name(team_max_priority(t))}."]
            for field, t, _ in refused
        },
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
    if spec.priority > team_max_priority(team):
        # A retry of a job created before the policy was lowered still reads as a retry.
        return _replay_or_raise(
            _priority_refusal([("priority", team, spec.priority)]), user, key, spec
        )
    refused = _beyond_quota([(spec, team)])
    if refused:
        return _replay_or_raise(refused[0], user, key, spec)
    now = now or timezone.now()
    job = _new_job(spec=spec, team=team, user=user, key=key, now=now)
    try:
        _insert_within_queue_limit(job, _submitted_event(job, user, now), team, user)
    except (TooManyQueued, IntegrityError) as exc:
        # A retry of a job that was created must read as such even once the queue is full, and
        # a concurrent duplicate loses on the unique key; looked up only here, so a keyed
        # submit that fits pays no extra query.
        return _replay_or_raise(exc, user, key, spec)
    _notify_jobs_changed()  # on commit: at once in autocommit, else with the caller's commit
    return SubmitResult(job, created=True)


def _replay_or_raise(
    error: Exception, user: AnyUser, key: str | None, spec: JobSpec
) -> SubmitResult:
    """A keyed submit that an earlier one with the same key already stored returns that job;
    anything else is refused with ``error``."""
    existing = _replay(user=user, key=key, spec=spec) if key is not None else None
    if existing is None:
        raise error
    return SubmitResult(existing, created=False)


def _in_batch(i: int, fields: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """Field errors of a batch's job ``i``, named as the batch names them (``jobs[i].field``)."""
    return {f"jobs[{i}].{name}": messages for name, messages in fields.items()}


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
            errors.update(_in_batch(i, exc.fields))
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
                exc.fields = _in_batch(i, exc.fields)
                raise
    sep = BATCH_KEY_SEPARATOR
    keys = [f"{key}{sep}{i}" for i in range(len(specs))] if key else [None] * len(specs)
    if key is not None:
        existing = _replay_batch(user=user, key=key, keys=keys, specs=specs)
        if existing is not None:
            return existing, False
    _refuse_batch_priorities(specs, teams)
    _refuse_batch_beyond_quota(specs, teams)
    now = now or timezone.now()
    jobs = [
        _new_job(spec=s, team=teams[s.team], user=user, key=k, now=now)
        for s, k in zip(specs, keys, strict=True)
    ]
    alias = router.db_for_write(Job)
    try:
        with transaction.atomic(using=alias):
            _refuse_batch_beyond_queue_limits(specs, teams, user, alias)
            _insert_jobs_with_events(jobs, [_submitted_event(j, user, now) for j in jobs])
            _notify_jobs_changed()
    except IntegrityError:
        if key is None:
            raise
        existing = _replay_batch(user=user, key=key, keys=keys, specs=specs)
        if existing is None:
            raise
        return existing, False
    return jobs, True


def _beyond_quota(pairs: Sequence[tuple[JobSpec, Team]]) -> dict[int, SpecError]:
    """The jobs their team's quota can never admit, by index (``hooks.quota_refusals``:
    nothing when the scheduling room is not loaded)."""
    return hooks.quota_refusals.ask(pairs) or {}


def _refuse_batch_beyond_quota(specs: Sequence[JobSpec], teams: Mapping[str, Team]) -> None:
    """Refuse the whole batch, naming every job its team's quota can never admit."""
    refused = _beyond_quota([(s, teams[s.team]) for s in specs])
    if refused:
        raise ApplicationError(
            f"{len(refused)} job(s) can never start under their team's quota; none were submitted.",
            fields={
                name: messages
                for i, exc in sorted(refused.items())
                for name, messages in _in_batch(i, exc.fields).items()
            },
        )


def _refuse_batch_priorities(specs: Sequence[JobSpec], teams: Mapping[str, Team]) -> None:
    """Refuse the whole batch, naming every job that asks for more than its team allows."""
    refused = [
        (f"jobs[{i}].priority", teams[s.team], s.priority)
        for i, s in enumerate(specs)
        if s.priority > team_max_priority(teams[s.team])
    ]
    if refused:
        raise _priority_refusal(refused)


def _refuse_batch_beyond_queue_limits(
    specs: Sequence[JobSpec], teams: Mapping[str, Team], user: AnyUser, alias: str
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
        ((teams[slug], queue_limits(teams[slug])) for slug in adding),
        key=lambda pair: pair[0].pk,
    )
    for team, limits in limited:
        if limits:
            field = f"jobs[{first[team.slug]}].team"
            _check_batch_queue_limit(team, user, adding[team.slug], alias, limits, field)


def _replay_batch(
    *, user: AnyUser, key: str, keys: list[str | None], specs: list[JobSpec]
) -> list[Job] | None:
    """The jobs an earlier batch with this key created, if any; a different batch is an error.

    A keyed batch is stored whole or not at all, as ``key#0 … key#(m-1)``: the one key past
    this batch's end (``key#n``) tells a longer earlier batch from this one, which would
    otherwise read as a replay of its first n jobs.
    """
    beyond = f"{key}{BATCH_KEY_SEPARATOR}{len(keys)}"
    found = {
        j.idempotency_key: j
        for j in Job.objects.filter(owner_id=user.pk, idempotency_key__in=[*keys, beyond])
    }
    if not found:
        return None
    if (
        len(found) != len(keys)
        or beyond in found
        or any(
            found[k].request_fingerprint != _fingerprint(s)
            for k, s in zip(keys, specs, strict=True)
        )
    ):
        raise Conflict(
            "This Idempotency-Key was already used for a different batch.",
            fields={"Idempotency-Key": ["Reused with a different body; use a new key."]},
        )
    return [found[k] for k in keys]


MAX_CANCEL_REASON = 500


def _cancel_reason(reason: str | None) -> str:
    """The optional reason, trimmed; too long or not text is an error naming ``reason``."""
    if reason is None:
        return ""
    if not isinstance(reason, str):
        raise ApplicationError("Invalid cancel reason.", fields={"reason": ["Must be text."]})
    reason = " ".join(reason.split())
    if len(reason) > MAX_CANCEL_REASON:
        raise ApplicationError(
            "The cancel reason is too long.",
            fields={"reason": [f"At most {MAX_CANCEL_REASON} characters."]},
        )
    return reason


def job_cancel(*, job: Job, by: AnyUser, reason: str | None = None) -> Job:
    """Cancel a job: a queued one at once, one holding a reservation or a cluster object via
    CANCELLING (the clusters side deletes the Volcano Job, then marks it CANCELLED).

    Cancelling a finished job is a Conflict, not a silent success; cancelling one that is
    already being cancelled returns it unchanged. The optional ``reason`` is kept on the job
    and in its timeline, for its owner to read.
    """
    require_cancel(by, job)
    reason = _cancel_reason(reason)
    said = f"Cancelled by {by.get_username()}" + (f": {reason}" if reason else ".")
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
            message=said,
            actor_id=by.pk,
            updates={"cancel_reason": reason},
        ):
            if to == JobState.CANCELLED:
                _notify_jobs_changed()
            else:
                hooks.job_cancelling.fire_on_commit(job.pk)
            job.refresh_from_db()
            return job
    raise Conflict("Job state keeps changing; try again.")
