"""Writing the last cycle's waits (``JobWait``): why each queued job waits, and its place in line.

A place in line is stored as a sort key (:func:`order_keys`), so a cycle that admits the jobs
at the head leaves the keys of everyone behind them as they were: it rewrites only the waits
whose reason or relative order changed (about half of 9,000 queued in the cycle bench's steady
state, where ranks changed all 9,000). Users read the rank, counted from the keys when asked
(:func:`queue_positions_fill` for a list).

The cycle rewrites thousands of these per run, so they live in a narrow table beside the job
(``portal.models.JobWait``) and go in one statement. Only the cycle writes them, under its
lock; the rows are locked in job id order all the same (``portal.jobs.rowlock``), so a writer
added later cannot meet it in the opposite order.

PostgreSQL: one statement that updates the rows already there and inserts the rest, from
arrays (``unnest``), each string column sent once as its distinct values and an index per row
(a deep queue waits in a handful of ways: 9,450 reasons were 8 distinct messages). SQLite (the
demo): the ORM's upsert.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from django.db import connection

from portal import db
from portal.models import Job, JobState, JobWait

__all__ = [
    "ORDER_KEY_GAP",
    "WaitRow",
    "order_keys",
    "queue_positions_fill",
    "waits_clear",
    "waits_prune",
    "waits_write",
]

ORDER_KEY_GAP = 1 << 20
"""Room left between neighbouring keys when keys are handed out afresh: about twenty jobs can
be slotted one by one into one gap before the queue is renumbered."""


class WaitRow(NamedTuple):
    """One queued job's wait, as the cycle decided it."""

    job_id: int
    code: str
    reason: str
    order_key: int | None
    notes_id: str | None
    model: str


def waits_write(rows: Sequence[WaitRow]) -> int:
    """Insert or replace the waits of ``rows``' jobs; returns how many rows were written."""
    if not rows:
        return 0
    ordered = sorted(rows, key=lambda row: row.job_id)
    if not db.on_postgresql():
        JobWait.objects.bulk_create(
            [
                JobWait(
                    job_id=r.job_id,
                    code=r.code,
                    reason=r.reason,
                    order_key=r.order_key,
                    notes_id=r.notes_id,
                    model=r.model,
                )
                for r in ordered
            ],
            update_conflicts=True,
            unique_fields=["job"],
            update_fields=["code", "reason", "order_key", "notes", "model"],
            batch_size=500,
        )
        return len(ordered)
    codes, code_at = _indexed(r.code for r in ordered)
    reasons, reason_at = _indexed(r.reason for r in ordered)
    notes, notes_at = _indexed(r.notes_id for r in ordered)
    models, model_at = _indexed(r.model for r in ordered)
    table = connection.ops.quote_name(JobWait._meta.db_table)
    with connection.cursor() as cur:
        cur.execute(
            # Each row is decoded once (``v``); a job that already waits is updated in place
            # and the others are inserted. The UPDATE joined on the key costs half what the
            # upsert's speculative insert did per row, and the table's free space (fillfactor,
            # migration 0025) keeps most new versions on their page with no index entry to add.
            # Its rows are locked first in id order (``portal.jobs.rowlock``).
            "WITH v AS MATERIALIZED (SELECT u.id AS job_id, (%s::varchar[])[u.c] AS code, "  # noqa: S608 - the model's table
            "(%s::text[])[u.r] AS reason, u.p AS order_key, (%s::varchar[])[u.n] AS notes_id, "
            "(%s::varchar[])[u.m] AS model FROM unnest(%s::bigint[], %s::int[], %s::int[], "
            "%s::bigint[], %s::int[], %s::int[]) AS u(id, c, r, p, n, m)), "
            f"updated AS (UPDATE {table} AS w SET code = v.code, reason = v.reason, "
            "order_key = v.order_key, notes_id = v.notes_id, model = v.model "
            "FROM v WHERE w.job_id = v.job_id RETURNING w.job_id), "
            f"inserted AS (INSERT INTO {table} (job_id, code, reason, order_key, notes_id, model) "
            "SELECT * FROM v WHERE NOT EXISTS (SELECT 1 FROM updated AS d WHERE d.job_id = "
            "v.job_id) ORDER BY v.job_id ON CONFLICT (job_id) DO UPDATE SET code = "
            "EXCLUDED.code, reason = EXCLUDED.reason, order_key = EXCLUDED.order_key, "
            "notes_id = EXCLUDED.notes_id, model = EXCLUDED.model RETURNING job_id) "
            "SELECT (SELECT count(*) FROM updated) + (SELECT count(*) FROM inserted)",
            [
                codes,
                reasons,
                notes,
                models,
                db.int_array(r.job_id for r in ordered),
                db.int_array(code_at),
                db.int_array(reason_at),
                db.int_array(r.order_key for r in ordered),
                db.int_array(notes_at),
                db.int_array(model_at),
            ],
        )
        return int(cur.fetchone()[0])


def order_keys(previous: Sequence[int | None]) -> list[int]:
    """Sort keys for a queue in its new order, given each job's key from the last cycle (None
    for a job no cycle ranked), changing as few keys as possible.

    The longest run of old keys that still increases along the new order is kept; every other
    job gets a key in the gap between its kept neighbours. When a gap is too narrow for the
    jobs to fit, every job gets a fresh key, ``ORDER_KEY_GAP`` apart (one full rewrite, then
    room again)."""
    n = len(previous)
    keys: list[int | None] = [None] * n
    for i in _longest_increasing(previous):
        keys[i] = previous[i]
    i = 0
    before: int | None = None
    while i < n:
        if keys[i] is not None:
            before = keys[i]
            i += 1
            continue
        end = i
        while end < n and keys[end] is None:
            end += 1
        after = keys[end] if end < n else None
        m = end - i
        if before is not None:
            low = before
        elif after is not None:
            low = after - (m + 1) * ORDER_KEY_GAP
        else:
            low = 0
        high = after if after is not None else low + (m + 1) * ORDER_KEY_GAP
        if high - low <= m:
            return [(k + 1) * ORDER_KEY_GAP for k in range(n)]
        for k in range(m):
            keys[i + k] = low + (high - low) * (k + 1) // (m + 1)
        before = keys[end - 1]
        i = end
    return keys  # type: ignore[return-value]


def _longest_increasing(values: Sequence[int | None]) -> list[int]:
    """Indexes of a longest strictly increasing run of the non-None ``values`` (O(n log n))."""
    tails: list[int] = []  # smallest last value of a run of each length
    tail_at: list[int] = []  # its index
    back = [-1] * len(values)
    for i, v in enumerate(values):
        if v is None:
            continue
        k = bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
            tail_at.append(i)
        else:
            tails[k] = v
            tail_at[k] = i
        back[i] = tail_at[k - 1] if k else -1
    run: list[int] = []
    i = tail_at[-1] if tail_at else -1
    while i >= 0:
        run.append(i)
        i = back[i]
    return run


def queue_positions_fill(jobs: Iterable[Job]) -> None:
    """Count the ranks of a list's queued jobs in one query, so each ``queue_position`` read
    after it costs nothing (a page of 100 would otherwise ask 100 times)."""
    keyed = [j for j in jobs if j.queue_order_key is not None]
    if not keyed:
        return
    keys = sorted({j.queue_order_key for j in keyed})  # type: ignore[type-var]
    ahead = dict(zip(keys, _counts_below(keys), strict=True))
    for job in keyed:
        job._queue_position = ahead[job.queue_order_key] + 1  # type: ignore[index]


def _counts_below(keys: list[int]) -> list[int]:
    """For each of ``keys`` (sorted), how many jobs queued now have a smaller key."""
    queued = sorted(
        JobWait.objects.filter(job__state=JobState.QUEUED, order_key__isnull=False).values_list(
            "order_key", flat=True
        )
    )
    return [bisect_left(queued, k) for k in keys]


def _indexed(values: Iterable[str | None]) -> tuple[list[str | None], list[int]]:
    """A column as its distinct values and, per row, the 1-based index of its value there."""
    distinct: dict[str | None, int] = {}
    at = [distinct.setdefault(v, len(distinct) + 1) for v in values]
    return list(distinct), at


def waits_clear(job_ids: Iterable[int]) -> int:
    """Forget the waits of jobs that left the queue (admitted); returns how many."""
    ids = sorted(job_ids)
    if not ids:
        return 0
    deleted, _ = JobWait.objects.filter(job_id__in=ids).delete()
    return deleted


def waits_prune() -> int:
    """Delete the waits of jobs no longer queued (cancelled, failed while queued: their rows
    are ignored by readers, ``Job._wait``); returns how many."""
    deleted, _ = JobWait.objects.exclude(job__state=JobState.QUEUED).delete()
    return deleted
