"""One lock order for job rows: ascending id, taken inside the statement that updates them.

Two transactions that lock overlapping sets of rows in different orders can each hold a row the
other waits for, and PostgreSQL then kills one of them ("deadlock detected … while updating
tuple … in relation portal_job"). An ``UPDATE … WHERE id IN (…)`` or ``UPDATE … FROM
jsonb_to_recordset(…)`` locks its rows in whatever order its plan reads them: the order of the
JSON rows in a nested loop, the heap's in a hash join or a bitmap scan. Two dispatch batches,
or the estimate refresh and the scheduling cycle, met in opposite orders under load.

So every multi-row update of job rows goes through here (the state machine's bulk
compare-and-set writes the same clause into its own statement): its rows are locked by a
``SELECT … ORDER BY id FOR NO KEY UPDATE`` inside the same statement, and the UPDATE touches
only the rows that sub-select locked. The order costs no round trip. ``NO KEY UPDATE`` is the
lock such an UPDATE takes anyway; unlike ``FOR UPDATE`` it does not block inserts whose foreign
key points at the job (its events, its Volcano Job record). One order per statement does not
order a transaction of several (the cycle locks its admissions, then its reasons): a writer
that meets one and can let rows go skips those it would wait for (``skip_locked``).

A transaction that fails anyway (a deadlock with something that does not follow the order yet,
a serialization failure) did nothing, and running it again is the cure:
:func:`conflicts_retried`.

SQLite (the demo) has one writer at a time and no row locks: the plain update there.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from django.core.exceptions import EmptyResultSet
from django.db import DatabaseError, connection
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL
from psycopg import errors as pg_errors

from portal import db
from portal.models import Job

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = [
    "ID_ORDER",
    "conflicts_retried",
    "jobs_update",
    "jobs_update_rows",
    "lost_to_a_conflict",
]

ID_ORDER = "ORDER BY id FOR NO KEY UPDATE"
"""The tail of every sub-select that locks job rows for an update: the one global order."""


def _locked_in_id_order(rows: QuerySet[Job]) -> RawSQL:
    """``rows``' ids as a sub-select that locks them in ascending id order.

    Compiled from the queryset (its conditions stay the ORM's), with the ordering and the lock
    clause written here: Django drops the ordering of an ``__in`` sub-query and refuses
    ``select_for_update`` outside a transaction, though one statement is a transaction."""
    sql, params = rows.order_by("pk").values("pk").query.sql_with_params()
    table = connection.ops.quote_name(Job._meta.db_table)
    return RawSQL(f"{sql} FOR NO KEY UPDATE OF {table}", params)  # noqa: S611 - compiled SQL


def jobs_update(rows: QuerySet[Job], **fields: Any) -> int:
    """``rows.update(**fields)``, its rows locked in ascending id order within the statement;
    returns how many rows it updated.

    On PostgreSQL: ``UPDATE portal_job SET … WHERE id IN (SELECT id … ORDER BY id FOR NO KEY
    UPDATE)``. The sub-select checks ``rows``' conditions on each row's latest version once it
    holds the row's lock, so the UPDATE acts on exactly the rows it locked, as the plain
    update would have, and never waits for a row after the lock is taken."""
    if not db.on_postgresql():
        return int(rows.update(**fields))
    try:
        locked = _locked_in_id_order(rows)
    except EmptyResultSet:  # ``pk__in=[]``: nothing to lock, nothing to update
        return 0
    return int(Job.objects.filter(pk__in=locked).update(**fields))


def jobs_update_rows(
    rows: Sequence[Mapping[str, Any]],
    *,
    where: Mapping[str, Any],
    skip_locked: bool = False,
) -> int:
    """``UPDATE portal_job SET <fields> = <row's values> WHERE id = row["id"] AND <where>`` for
    each row (dicts of field attnames, each with the same names, ``id`` among them), in one
    statement, the rows locked in ascending id order; returns how many rows it updated.

    ``skip_locked``: leave out rows another transaction holds instead of waiting for them. For
    a writer whose rows are rewritten soon anyway (the start estimates): it can then never be
    one side of a deadlock, whatever order the other side's statements lock their rows in.
    Elsewhere (SQLite): one ORM update per row, in id order.

    PostgreSQL: the rows travel as one JSON object keyed by id (one parameter: thousands of
    scalar parameters cost more to quote and parse than the update costs to run), and each
    locked row reads its values from it by key:

        UPDATE portal_job AS t SET … FROM (SELECT id … ORDER BY id FOR NO KEY UPDATE) AS l,
            LATERAL jsonb_to_record(%s -> l.id::text) AS v(…) WHERE t.id = l.id

    The UPDATE touches only the rows the sub-select locked, and every join in it is on the
    job table's primary key: joining the JSON's rows to the locked ones instead (two scans
    with no index, the function's row count a guess of 100) planned as a nested loop, far
    slower than the plain update it replaces.

    A field that repeats (a waiting reason's wording, shared by every job of a failure group)
    travels once, in an array of its distinct values, and each row carries its index there
    (:func:`_interned`): a cycle's 9,450 reasons were 3.6 MB of JSON in 8 distinct messages,
    and parsing it cost more than the update. The JSON's keys are short aliases for the same
    reason."""
    if not rows:
        return 0
    if not db.on_postgresql():
        ordered = sorted(rows, key=lambda row: row["id"])
        names = [name for name in ordered[0] if name != "id"]
        return sum(
            Job.objects.filter(id=row["id"], **where).update(**{n: row[n] for n in names})
            for row in ordered
        )
    meta = Job._meta
    qn = connection.ops.quote_name
    names = [name for name in rows[0] if name != "id"]
    fields = [meta.get_field(name) for name in names]
    columns = [[row[name] for row in rows] for name in names]
    set_params: list[Any] = []
    typed, sets = [], []
    for k, (field, values) in enumerate(zip(fields, columns, strict=True)):
        db_type = field.db_type(connection)
        distinct = _interned(values)
        if distinct is None:
            typed.append(f"c{k} {db_type}")
            sets.append(f"{qn(field.column)} = v.c{k}")
            continue
        index = {value: i for i, value in enumerate(distinct, start=1)}
        columns[k] = [index[value] for value in values]
        typed.append(f"c{k} integer")
        sets.append(f"{qn(field.column)} = (%s::{db_type}[])[v.c{k}]")
        set_params.append(distinct)
    # bigint[] like the column: a list of small ints arrives as smallint[], and a comparison
    # across types cannot use a hash of the array (each row then scanned it through).
    conditions = ["id = ANY(%s::bigint[])"]
    where_params: list[Any] = [db.int_array(sorted(row["id"] for row in rows))]
    for name, value in where.items():
        field = meta.get_field(name)
        conditions.append(f"{qn(field.column)} = %s")
        where_params.append(field.get_db_prep_value(value, connection))
    skip = " SKIP LOCKED" if skip_locked else ""
    table = qn(meta.db_table)
    aliases = [f"c{k}" for k in range(len(fields))]
    by_id = {
        str(row["id"]): dict(zip(aliases, values, strict=True))
        for row, values in zip(rows, zip(*columns, strict=True), strict=True)
    }
    params = [*set_params, *where_params, json.dumps(by_id, default=str)]
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE {table} AS t SET {', '.join(sets)} "  # noqa: S608 - names from the model
            f"FROM (SELECT id FROM {table} WHERE {' AND '.join(conditions)} {ID_ORDER}{skip}) "
            f"AS l, LATERAL jsonb_to_record(%s::jsonb -> l.id::text) AS v({', '.join(typed)}) "
            "WHERE t.id = l.id",
            params,
        )
        return int(cur.rowcount)


INTERN_AT_MOST = 0.25
"""A string field travels as an index into its distinct values when there are at most this
share of distinct values among the rows (a reason's wording, a notes key, a model)."""


def _interned(values: Sequence[Any]) -> list[str] | None:
    """The distinct values of a column of strings (``None`` among them allowed), in first-seen
    order, when they repeat enough to be worth sending once; otherwise None."""
    if len(values) < 8 or not any(isinstance(v, str) for v in values):
        return None
    if not all(v is None or isinstance(v, str) for v in values):
        return None
    distinct = list(dict.fromkeys(values))
    if len(distinct) > INTERN_AT_MOST * len(values):
        return None
    return distinct


# PostgreSQL ended the transaction to break a deadlock, or because a concurrent one changed
# what it read (SERIALIZABLE / REPEATABLE READ): nothing of it happened.
_CONFLICTS = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)

RETRY_TRIES = 3
"""How many times :func:`conflicts_retried` runs a transaction that keeps losing, in all."""


def lost_to_a_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` (Django's wrapper, or psycopg's error itself) says PostgreSQL aborted the
    transaction for a deadlock or a serialization failure."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, _CONFLICTS):
            return True
        seen = seen.__cause__
    return False


def conflicts_retried(work: Callable[[], T], *, tries: int = RETRY_TRIES) -> T:
    """``work()``, run again (up to ``tries`` times in all, after a short random pause) when
    PostgreSQL aborted it for a deadlock or a serialization failure.

    ``work`` must open its own transaction and be safe to run again from the start: a
    transaction that lost such a conflict left nothing behind. Inside a caller's transaction
    there is nothing to retry (the whole of it is lost, and the caller decides), so ``work``
    runs once."""
    if connection.in_atomic_block:
        return work()
    for attempt in range(1, tries + 1):
        try:
            return work()
        except DatabaseError as exc:
            if attempt >= tries or not lost_to_a_conflict(exc):
                raise
            log.warning("transaction lost a conflict (attempt %d of %d): %s", attempt, tries, exc)
            time.sleep(random.uniform(0.0, 0.05 * attempt))  # noqa: S311 - jitter, not a secret
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
