"""The job state machine: the one place that changes ``Job.state``.

Every change is a compare-and-set: ``UPDATE … WHERE id = … AND state IN (expected)``. A worker
that loses the race (a duplicated or reordered message, a cancel that got there first) sees
``False`` and does nothing, so at-least-once delivery is harmless. The edges below are exactly
the ones drawn in ``shared/design/ARCHITECTURE.md``; asking for any other edge raises before the
database is touched.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import DateTimeField, F, Subquery, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from portal import db, hooks
from portal.jobs.attempts import ARCHIVED_FIELDS, attempt_archive
from portal.jobs.rowlock import ID_ORDER
from portal.models import ACTIVE_STATES, TERMINAL_STATES, Job, JobEvent, JobState
from portal.notifications import notify_job_event

S = JobState

LEGAL_TRANSITIONS: Mapping[JobState, frozenset[JobState]] = {
    S.QUEUED: frozenset({S.ADMITTED, S.CANCELLING, S.CANCELLED, S.FAILED}),
    # ADMITTED -> QUEUED: a cluster unreachable past its grace, whose create never reached it
    # (``clusters.status.unreachable_requeue``).
    S.ADMITTED: frozenset({S.SUBMITTED, S.QUEUED, S.PREEMPTING, S.CANCELLING, S.FAILED}),
    S.SUBMITTED: frozenset({S.RUNNING, S.PREEMPTING, S.CANCELLING, S.FAILED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.PREEMPTING, S.CANCELLING}),
    S.PREEMPTING: frozenset({S.QUEUED, S.FAILED}),
    S.CANCELLING: frozenset({S.CANCELLED, S.FAILED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}
assert all(S.FAILED in LEGAL_TRANSITIONS[s] for s in ACTIVE_STATES)

# Fields a transition may set alongside the state (assignment, timestamps, reasons).
_UPDATABLE = frozenset(
    {
        "cluster_id",
        "gpu_model_id",
        "admitted_at",
        "started_at",
        "finished_at",
        "volcano_job_name",
        "node_plan",
        "device_plan",
        "placement",
        "dispatch_attempts",
        "dispatch_next_at",
        "dispatch_not_before",
        "dispatch_owner",
        "cancel_reason",
    }
)


def _notify_released(to: JobState) -> None:
    """Capacity and quota came free (terminal, or requeued): ``hooks.released`` on commit."""
    if to in TERMINAL_STATES or to == S.QUEUED:
        hooks.released.fire_on_commit()


class IllegalTransition(ValueError):
    """Raised for an edge the state machine does not have; nothing was changed."""


def is_legal(from_state: str, to_state: str) -> bool:
    return JobState(to_state) in LEGAL_TRANSITIONS[JobState(from_state)]


def _check_edges(expected: tuple[JobState, ...], to: JobState) -> None:
    illegal = [e for e in expected if to not in LEGAL_TRANSITIONS[e]]
    if illegal:
        raise IllegalTransition(f"no transition from {', '.join(illegal)} to {to}")


def _timestamp_updates(to: JobState, moment: Any) -> dict[str, Any]:
    """Timestamps that follow from the target state, so callers cannot forget them.

    ``moment`` is what the row's ``state_changed_at`` becomes (see
    :func:`_not_before_the_last_change`): a state's own timestamp is the moment of its event,
    so it never precedes the timestamps of the states before it."""
    if to in TERMINAL_STATES:
        return {"finished_at": moment}
    if to == S.ADMITTED:
        # A new admission is a new dispatch: attempts spent on an earlier run do not count.
        return {
            "admitted_at": moment,
            "dispatch_attempts": 0,
            "dispatch_next_at": None,
            "dispatch_not_before": None,
            "dispatch_owner": "",
            "creates_unsure": 0,
        }
    if to == S.RUNNING:
        return {"started_at": moment}
    if to == S.QUEUED:
        # Requeued (after preemption): the reservation is gone, the place in line is kept.
        # The run that ended is archived first (``attempt_archive``), so nothing is lost.
        return {
            "cluster_id": None,
            "gpu_model_id": None,
            "admitted_at": None,
            "started_at": None,
            "node_plan": [],
            "device_plan": [],
            "placement": {},
            "volcano_job_name": "",
        }
    return {}


def job_transition(
    *,
    job_id: int,
    expected: JobState | Iterable[JobState],
    to: JobState,
    reason: str,
    message: str = "",
    actor_id: int | None = None,
    updates: Mapping[str, Any] | None = None,
    now: dt.datetime | None = None,
    same_run: int | None = None,
) -> bool:
    """Move one job from one of ``expected`` to ``to`` and record a JobEvent; True if we won.

    ``same_run``: move it only while it is still on that attempt (``Job.attempt_number``), for
    a change decided from what one run's Volcano Job said: a job read before a slow list may
    have been requeued and started again since, in the same state, under another object.

    Returns False, changing nothing, when the job is no longer in an expected state (someone
    else moved it first). Raises :class:`IllegalTransition` for an edge that does not exist.
    """
    expected_states = (
        (JobState(expected),) if isinstance(expected, str) else tuple(JobState(e) for e in expected)
    )
    to = JobState(to)
    _check_edges(expected_states, to)
    extra = dict(updates or {})
    unknown = set(extra) - _UPDATABLE
    if unknown:
        raise ValueError(f"job_transition cannot set {sorted(unknown)}")
    now = now or timezone.now()
    fields = {
        **_timestamp_updates(to, _not_before_the_last_change(now)),
        **_not_before_the_earlier_states(extra),
        "state": to,
        "state_changed_at": _not_before_the_last_change(now),
    }
    if to == S.PREEMPTING and reason == PREEMPTED_REASON:
        fields["preemption_count"] = F("preemption_count") + 1
    # A requeue ends a run whose placement the update clears: read it, under the lock, first.
    archiving = to == S.QUEUED
    if archiving:
        # The next run is a new attempt, under a Volcano Job name of its own.
        fields["attempt_number"] = F("attempt_number") + 1

    this_run = {} if same_run is None else {"attempt_number": same_run}
    with transaction.atomic():
        before: dict[str, Any] | None = None
        if len(expected_states) == 1 and not archiving:
            from_state = expected_states[0]
            won = Job.objects.filter(id=job_id, state=from_state, **this_run).update(**fields) == 1
        else:
            # Several possible origins: lock the row to learn which one the event records.
            before = (
                Job.objects.select_for_update(of=("self",))
                .filter(id=job_id, state__in=expected_states, **this_run)
                .values("state", "state_changed_at", *(ARCHIVED_FIELDS if archiving else ()))
                .first()
            )
            if before is None:
                return False
            from_state = JobState(before["state"])
            won = Job.objects.filter(id=job_id, state=from_state).update(**fields) == 1
        if not won:
            return False
        if archiving and before is not None:
            # The run ends at the requeue's moment, as the row (locked) now carries it.
            ended = max(now, before["state_changed_at"])
            attempt_archive(job_id=job_id, before=before, reason=reason, message=message, now=ended)
        event = JobEvent.objects.create(
            job_id=job_id,
            # The moment the row now carries: never before the event of the state it left.
            created_at=Subquery(Job.objects.filter(pk=job_id).values("state_changed_at")[:1]),
            from_state=from_state,
            to_state=to,
            reason=reason,
            message=message,
            actor_id=actor_id,
        )
        notify_job_event(event)
        _notify_released(to)
    return True


def _not_before_the_last_change(now: dt.datetime) -> Greatest:
    """``now``, or the job's last change if that is later: the moment of a change, which its
    event and the state's own timestamp (``admitted_at``, ``started_at``, ``finished_at``)
    all carry.

    A job's timeline must read in causal order. A caller's clock can be behind the change it
    follows: the scheduling cycle reads ``now`` before it loads the queue, so a submit that
    commits in between was stamped after the cycle's ``now``, and its "Admitted" (and its
    ``admitted_at``) came out a few milliseconds before its "Submitted" (and its
    ``submitted_at``): a negative queue wait, and an audit replaying events that saw more
    jobs at once than the quota holds. Workers on other hosts have clocks of their own, too.

    Why here, in SQL, and not by leaving late submits out of the cycle's snapshot: the row
    decides, under its own lock, for every writer at once (the cycle, the dispatcher, the
    watcher, a cancel), whatever clock its caller read; a filter on the snapshot would mend
    the cycle alone, and hold back a job that is ready for one more cycle. The price is that
    a batch admitted at one ``now`` may carry a few later ``admitted_at``s (those submitted
    during the load), each the moment of its own event.
    """
    return Greatest(Value(now, output_field=DateTimeField()), F("state_changed_at"))


# For each timestamp a caller may set itself (a cluster's own time: when the pods started or
# ended), the ones of the states before it, the latest set one first.
_EARLIER_TIMESTAMPS: Mapping[str, tuple[str, ...]] = {
    "admitted_at": ("submitted_at",),
    "started_at": ("admitted_at", "submitted_at"),
    "finished_at": ("started_at", "admitted_at", "submitted_at"),
}


def _not_before_the_earlier_states(updates: Mapping[str, Any]) -> dict[str, Any]:
    """``updates``, with each timestamp a caller set itself raised to the latest of the
    states before it, as the row holds them under its lock.

    A cluster's clock is not the portal's, and Kubernetes times have whole seconds: a job
    whose pods started and ended within a second (or a cluster a second behind) reported an
    end before its start, or a start before its admission."""
    fields = dict(updates)
    for name, earlier in _EARLIER_TIMESTAMPS.items():
        value = fields.get(name)
        if isinstance(value, dt.datetime):
            floor = Coalesce(*earlier) if len(earlier) > 1 else F(earlier[0])
            fields[name] = Greatest(Value(value, output_field=DateTimeField()), floor)
    return fields


# The changes the cycle and the dispatcher make by the thousand; no one is notified of them.
BULK_TARGETS = frozenset({S.ADMITTED, S.SUBMITTED})
# The fields a bulk change sets to its moment (``_not_before_the_last_change``).
_MOMENTS = frozenset({"state_changed_at", "admitted_at", "started_at", "finished_at"})


@dataclass(frozen=True)
class Change:
    """One job's part of a bulk transition: its id, fields to set, and its event message."""

    job_id: int
    updates: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""


def jobs_transition_bulk(
    *,
    changes: Sequence[Change],
    expected: JobState,
    to: JobState,
    reason: str,
    now: dt.datetime | None = None,
) -> set[int]:
    """Move many jobs from ``expected`` to ``to`` in one transaction; returns the ids that won.

    On PostgreSQL the compare-and-set is one ``UPDATE … WHERE state = expected RETURNING id``
    per 1,000 rows; elsewhere rows still in ``expected`` are locked and updated together. Events
    go in one insert. Used by the scheduling cycle, whose admissions would otherwise cost two
    statements each. Every change must set the same fields.
    """
    expected, to = JobState(expected), JobState(to)
    _check_edges((expected,), to)
    if to not in BULK_TARGETS:
        # Other changes archive a run or notify the owner, which job_transition does per job.
        raise ValueError(f"jobs_transition_bulk moves jobs to {sorted(BULK_TARGETS)} only")
    for change in changes:
        unknown = set(change.updates) - _UPDATABLE
        if unknown:
            raise ValueError(f"jobs_transition_bulk cannot set {sorted(unknown)}")
    if not changes:
        return set()
    if len({c.job_id for c in changes}) != len(changes):
        raise ValueError("jobs_transition_bulk takes each job at most once")
    now = now or timezone.now()
    base = {**_timestamp_updates(to, now), "state": to, "state_changed_at": now}
    # No savepoint: a caller's transaction (a dispatch batch's) takes this one in whole.
    with transaction.atomic(savepoint=False):
        if db.on_postgresql():
            won = _bulk_cas_postgres(changes, expected, base, reason)
        else:
            moments = _bulk_cas_locked(changes, expected, base)
            won = set(moments)
            by_id = {c.job_id: c for c in changes}
            JobEvent.objects.bulk_create(
                [
                    JobEvent(
                        job_id=job_id,
                        created_at=moments[job_id],
                        from_state=expected,
                        to_state=to,
                        reason=reason,
                        message=by_id[job_id].message,
                    )
                    for job_id in sorted(won)
                ],
                batch_size=1000,
            )
        if won:
            _notify_released(to)
    return won


def _bulk_cas_postgres(
    changes: Sequence[Change], expected: JobState, base: Mapping[str, Any], reason: str
) -> set[int]:
    """One statement: the compare-and-set of every row (``UPDATE … WHERE id = … AND state =
    expected RETURNING id``) and the events of the rows that won.

    One JSON parameter carries every row: thousands of scalar or array parameters cost more to
    quote and parse than the update costs to run, and building JobEvent instances for
    ``bulk_create`` cost more than the insert.

    The rows still in ``expected`` are locked first, in ascending id order, by a sub-select of
    the same statement, and the UPDATE touches only those: alone, it locked them in its plan's
    order (the JSON's, or the heap's), and two batches handed overlapping rows in different
    orders deadlocked. Each locked row reads its values from the JSON object by its id, so
    every join is on the primary key (``portal.jobs.rowlock.jobs_update_rows``)."""
    keys = sorted(changes[0].updates)
    if any(sorted(c.updates) != keys for c in changes):
        raise ValueError("every change of a bulk transition must set the same fields")
    fields = [Job._meta.get_field(k) for k in keys]
    fixed = [(Job._meta.get_field(k), v) for k, v in base.items() if k not in changes[0].updates]
    # state_changed_at never goes back (see _not_before_the_last_change); the events and the
    # state's own timestamp (admitted_at) take the same moment.
    assignments = [
        f'"{f.column}" = GREATEST(%s, j."state_changed_at")'
        if f.name in _MOMENTS and value is not None
        else f'"{f.column}" = %s'
        for f, value in fixed
    ]
    assignments += [f'"{f.column}" = v."{f.column}"' for f in fields]
    record = ", ".join(
        ["event_message text", *(f'"{f.column}" {f.db_type(connection)}' for f in fields)]
    )
    by_id = {
        str(c.job_id): {
            "event_message": c.message,
            **{f.column: c.updates[k] for f, k in zip(fields, keys, strict=True)},
        }
        for c in changes
    }
    params: list[Any] = [f.get_db_prep_save(v, connection) for f, v in fixed]
    params += [
        db.int_array(sorted(c.job_id for c in changes)),
        expected,
        json.dumps(by_id, default=str),
    ]
    # The events: at the moment each row now carries, from ``expected`` to the new state.
    params += [expected, base["state"], reason]
    with connection.cursor() as cur:
        cur.execute(
            f"WITH won AS (UPDATE portal_job AS j SET {', '.join(assignments)} "  # noqa: S608
            # The rows still in ``expected``, locked in the one global order.
            f"FROM (SELECT id FROM portal_job WHERE id = ANY(%s::bigint[]) AND state = %s "
            f"{ID_ORDER}) AS l, LATERAL jsonb_to_record(%s::jsonb -> l.id::text) AS v({record}) "
            # Only the rows locked above, each still in ``expected`` under its lock. (No
            # ``j.state = …`` here: a guess of one queued row put the lock in a nested loop.)
            "WHERE j.id = l.id "
            "RETURNING j.id, j.state_changed_at, v.event_message), "
            "events AS (INSERT INTO portal_jobevent "
            "(job_id, created_at, from_state, to_state, reason, message, actor_id) "
            "SELECT id, state_changed_at, %s, %s, %s, event_message, NULL FROM won ORDER BY id) "
            "SELECT id FROM won",
            params,
        )
        return {row[0] for row in cur.fetchall()}


def _bulk_cas_locked(
    changes: Sequence[Change], expected: JobState, base: Mapping[str, Any]
) -> dict[int, dt.datetime]:
    """Portable path (SQLite in the demo): lock the rows still in ``expected``, then update;
    returns each updated row's moment (``_not_before_the_last_change``, taken in Python from
    the row as locked)."""
    by_id = {c.job_id: c for c in changes}
    rows = list(
        Job.objects.select_for_update(skip_locked=True)
        .filter(id__in=by_id, state=expected)
        .order_by("id")  # the one lock order (portal.jobs.rowlock), where locks exist
        .only("id", "state_changed_at")
    )
    if not rows:
        return {}
    update_fields = set(base)
    moments: dict[int, dt.datetime] = {}
    for row in rows:
        moment = max(base["state_changed_at"], row.state_changed_at)
        moments[row.pk] = moment
        values = {
            **{k: moment if k in _MOMENTS and v is not None else v for k, v in base.items()},
            **by_id[row.pk].updates,
        }
        update_fields |= set(values)
        for name, value in values.items():
            setattr(row, name, value)
    Job.objects.bulk_update(rows, sorted(update_fields), batch_size=500)
    return moments


# ---------------------------------------------------------------------------------------------
# Ending a stop: CANCELLING and PREEMPTING once the Volcano Job is gone
# ---------------------------------------------------------------------------------------------
# The reason of a user's cancel (``portal.jobs.services.job_cancel``). Any other reason for
# entering CANCELLING is a stop the portal decided on (max runtime, pods that cannot start),
# and the job then ends FAILED with that reason instead of CANCELLED.
USER_CANCEL_REASON = "CancelRequested"
# The scheduler's reason for entering PREEMPTING (reclaim); any other is a requeue the
# portal decided on (pods unschedulable on the cluster), which ends QUEUED as "Requeued".
PREEMPTED_REASON = "Preempted"


def stop_event(job_id: int, state: JobState) -> JobEvent | None:
    """The event that moved the job into ``state`` (CANCELLING or PREEMPTING) most recently:
    its reason says why the job is being stopped, its message what the user is told."""
    return (
        JobEvent.objects.filter(job_id=job_id, to_state=state)
        .exclude(from_state=state)
        .order_by("-created_at", "-id")
        .first()
    )


def cancelling_end(*, job_id: int, message: str, now: dt.datetime | None = None) -> bool:
    """A CANCELLING job's Volcano Job is gone: CANCELLED after a user's cancel, FAILED with the
    stop's own reason (``MaxRuntimeExceeded``, ``ImagePullBackOff`` …) after the portal's.

    The job held its GPUs until now, so the books never count them free while pods may still
    run. A compare-and-set like every transition: True only for the caller that ended it.
    """
    entry = stop_event(job_id, S.CANCELLING)
    if entry is None or entry.reason == USER_CANCEL_REASON:
        return job_transition(
            job_id=job_id,
            expected=S.CANCELLING,
            to=S.CANCELLED,
            reason="Cancelled",
            message=message,
            now=now,
        )
    return job_transition(
        job_id=job_id,
        expected=S.CANCELLING,
        to=S.FAILED,
        reason=entry.reason,
        message=f"{entry.message} {message}".strip(),
        now=now,
    )


def preempting_end(*, job_id: int, now: dt.datetime | None = None) -> bool:
    """A PREEMPTING job's Volcano Job is gone: back to QUEUED (its place in line kept), with
    the message written when the stop was decided."""
    entry = stop_event(job_id, S.PREEMPTING)
    reclaimed = entry is None or entry.reason == PREEMPTED_REASON
    return job_transition(
        job_id=job_id,
        expected=S.PREEMPTING,
        to=S.QUEUED,
        reason=PREEMPTED_REASON if reclaimed else "Requeued",
        message=entry.message if entry else "",
        now=now,
    )
