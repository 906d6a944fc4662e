"""Job writers: submit (one or a batch) and cancel. Views, the API and tasks call only these."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, router, transaction
from django.utils import timezone

from clusters.selectors import largest_node_gpus
from portal import db, hooks
from portal.access import AnyUser, require_cancel, team_for_submit
from portal.errors import ApplicationError, Conflict, Forbidden
from portal.jobs.spec import JobSpec, SpecError, SpecLimits, parse_job_spec
from portal.jobs.state import job_transition
from portal.models import TERMINAL_STATES, Job, JobEvent, JobState, Priority, Team
from scheduling.catalog import catalog_entries


def _notify_jobs_changed() -> None:
    hooks.jobs_changed.fire_on_commit()


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


def _queue_limit(team: Team) -> int | None:
    """The team's ``max_queued_jobs``, read alongside its role by ``team_for_submit``."""
    return getattr(team, "max_queued_jobs", None)


def _member_queue_limit(team: Team) -> int | None:
    """The team's ``max_queued_jobs_per_user``, read alongside its role likewise."""
    return getattr(team, "max_queued_jobs_per_user", None)


def _has_queue_limits(team: Team) -> bool:
    return _queue_limit(team) is not None or _member_queue_limit(team) is not None


def _lock_team_queue(team: Team, alias: str) -> None:
    """Hold the team's queue-limit lock until the transaction ends (``portal.db``)."""
    db.transaction_lock(QUEUE_LIMIT_LOCK_NAMESPACE, team.pk, using=alias)


def _insert_job_with_event(job: Job, event: JobEvent) -> None:
    """INSERT a job and its first event, in one round trip where the database allows."""
    db.insert_with_child(job, event, fk="job")


def _insert_jobs_with_events(jobs: list[Job], events: list[JobEvent]) -> None:
    """Insert a batch's jobs and their first events; call inside a transaction."""
    db.insert_rows(jobs, events, fk="job")


def _refuse_beyond_queue_limit(
    team: Team, user: AnyUser, adding: int, alias: str, field: str = "team"
) -> None:
    """Refuse a submit that would leave ``team`` with more QUEUED jobs than its limit, or the
    submitting member with more of their own than the per-member limit; call under the team's
    queue lock.

    Counts at most ``limit`` rows (the ``(team, state)`` index, cut short by LIMIT), so a team
    with a million queued jobs costs no more to check than one at its limit.
    """
    asked = "this job" if adding == 1 else f"these {adding} jobs"
    advice = "Wait for queued jobs to start, or cancel some."
    limit = _queue_limit(team)
    if limit is not None:
        queued = (
            Job.objects.using(alias).filter(team_id=team.pk, state=JobState.QUEUED)[:limit].count()
        )
        if queued + adding > limit:
            raise Conflict(
                f"{team.name} already has {_queued_jobs(queued)} and may have at most {limit}; "
                f"{asked} would exceed it. {advice}",
                fields={field: [f"The team's queue is full ({queued} of {limit} queued jobs)."]},
            )
    own_limit = _member_queue_limit(team)
    if own_limit is not None:
        own = (
            Job.objects.using(alias)
            .filter(team_id=team.pk, owner_id=user.pk, state=JobState.QUEUED)[:own_limit]
            .count()
        )
        if own + adding > own_limit:
            raise Conflict(
                f"You already have {_queued_jobs(own)} in {team.name}, where each member may "
                f"have at most {own_limit}; {asked} would exceed it. {advice}",
                fields={
                    field: [
                        f"Your queue in this team is full ({own} of {own_limit} queued jobs "
                        "per member)."
                    ]
                },
            )


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
        existing = _replay(user=user, key=key, spec=spec) if key is not None else None
        if existing is not None:
            return SubmitResult(existing, created=False)
        raise _priority_refusal([("priority", team, spec.priority)])
    if key is not None and _has_queue_limits(team):
        # A retry of a job that was created must read as such even once the queue is full.
        existing = _replay(user=user, key=key, spec=spec)
        if existing is not None:
            return SubmitResult(existing, created=False)
    now = now or timezone.now()
    job = _new_job(spec=spec, team=team, user=user, key=key, now=now)
    try:
        _insert_within_queue_limit(job, _submitted_event(job, user, now), team, user)
    except IntegrityError:
        if key is None:
            raise
        existing = _replay(user=user, key=key, spec=spec)
        if existing is None:
            raise
        return SubmitResult(existing, created=False)
    _notify_jobs_changed()  # on commit: at once in autocommit, else with the caller's commit
    return SubmitResult(job, created=True)


def _insert_within_queue_limit(job: Job, event: JobEvent, team: Team, user: AnyUser) -> None:
    """Insert the job unless its team's (or its owner's) queue is full; a team without limits
    pays nothing."""
    if not _has_queue_limits(team):
        _insert_job_with_event(job, event)
        return
    alias = router.db_for_write(Job)
    with transaction.atomic(using=alias):
        _lock_team_queue(team, alias)
        _refuse_beyond_queue_limit(team, user, 1, alias)
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
    sep = BATCH_KEY_SEPARATOR
    keys = [f"{key}{sep}{i}" for i in range(len(specs))] if key else [None] * len(specs)
    if key is not None:
        existing = _replay_batch(user=user, key=key, keys=keys, specs=specs)
        if existing is not None:
            return existing, False
    _refuse_batch_priorities(specs, teams)
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
        (teams[slug] for slug in adding if _has_queue_limits(teams[slug])),
        key=lambda t: t.pk,
    )
    for team in limited:
        _lock_team_queue(team, alias)
        _refuse_beyond_queue_limit(
            team, user, adding[team.slug], alias, field=f"jobs[{first[team.slug]}].team"
        )


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
