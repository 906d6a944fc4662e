"""Writing the last cycle's waits (``JobWait``): why each queued job waits, and its place in line.

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

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from django.db import connection

from portal import db
from portal.models import JobState, JobWait

__all__ = ["WaitRow", "waits_clear", "waits_prune", "waits_write"]


class WaitRow(NamedTuple):
    """One queued job's wait, as the cycle decided it."""

    job_id: int
    code: str
    reason: str
    position: int | None
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
                    position=r.position,
                    notes_id=r.notes_id,
                    model=r.model,
                )
                for r in ordered
            ],
            update_conflicts=True,
            unique_fields=["job"],
            update_fields=["code", "reason", "position", "notes", "model"],
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
            "(%s::text[])[u.r] AS reason, u.p AS position, (%s::varchar[])[u.n] AS notes_id, "
            "(%s::varchar[])[u.m] AS model FROM unnest(%s::bigint[], %s::int[], %s::int[], "
            "%s::int[], %s::int[], %s::int[]) AS u(id, c, r, p, n, m)), "
            f"updated AS (UPDATE {table} AS w SET code = v.code, reason = v.reason, "
            "position = v.position, notes_id = v.notes_id, model = v.model "
            "FROM v WHERE w.job_id = v.job_id RETURNING w.job_id), "
            f"inserted AS (INSERT INTO {table} (job_id, code, reason, position, notes_id, model) "
            "SELECT * FROM v WHERE NOT EXISTS (SELECT 1 FROM updated AS d WHERE d.job_id = "
            "v.job_id) ORDER BY v.job_id ON CONFLICT (job_id) DO UPDATE SET code = "
            "EXCLUDED.code, reason = EXCLUDED.reason, position = EXCLUDED.position, "
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
                db.int_array(r.position for r in ordered),
                db.int_array(notes_at),
                db.int_array(model_at),
            ],
        )
        return int(cur.fetchone()[0])


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
