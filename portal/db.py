"""The PostgreSQL fast paths, each with its SQLite fallback written once.

Production runs on PostgreSQL; the demo (``make demo``) on SQLite. Where PostgreSQL lets a hot
path do in one statement what the ORM does in many (a bulk update or upsert from one JSON
parameter, an insert and its child row in one round trip, ``COPY``), or offers what SQLite has
no need of (advisory locks: SQLite has one writer at a time), the function here does the fast
thing on PostgreSQL and the plain ORM thing elsewhere. Domain code calls these and reads as
domain steps; this module knows nothing of jobs or clusters.

Only names and placeholders ever go into SQL text: every value is a parameter.
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from django.db import connection, connections, models, router, transaction
from django.db.models import Field, Model
from django.db.models.expressions import DatabaseDefault

log = logging.getLogger(__name__)

__all__ = [
    "exclusive_lock",
    "insert_rows",
    "insert_with_child",
    "insert_with_child_if",
    "int_array",
    "on_postgresql",
    "row_format",
    "transaction_lock",
    "transaction_lock_and_select",
    "try_transaction_lock",
    "upsert_rows",
]


def on_postgresql(conn: Any = None) -> bool:
    """Whether ``conn`` (default: the default connection) is PostgreSQL's."""
    return (conn or connection).vendor == "postgresql"


# ---------------------------------------------------------------------------------------------
# Locks
# ---------------------------------------------------------------------------------------------
@contextmanager
def exclusive_lock(key: int, fallback_file: Path) -> Iterator[bool]:
    """Yield True if this process now holds the lock named ``key``, False if another one does.

    PostgreSQL: a session advisory lock (released on exit, or with the connection if it dies,
    so a killed worker cannot wedge it). SQLite: an exclusive ``flock`` on ``fallback_file``,
    which holds across processes the same way.
    """
    if on_postgresql():
        with connection.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [key])
            got = bool(cur.fetchone()[0])
        try:
            yield got
        finally:
            if got:
                _advisory_unlock(key)
        return
    fallback_file.parent.mkdir(parents=True, exist_ok=True)
    with open(fallback_file, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _advisory_unlock(key: int) -> None:
    """Unlock, or drop the connection (and with it the lock) when unlocking fails: workers keep
    their connections between tasks, so a lock left on one would stop every other holder."""
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", [key])
            released = bool(cur.fetchone()[0])
    except Exception:
        released = False
    if not released:
        log.warning("could not release advisory lock %s; closing the connection instead", key)
        connection.close()


def transaction_lock(namespace: int, key: int, *, using: str) -> None:
    """Hold the lock (``namespace``, ``key``) until the current transaction ends.

    PostgreSQL: a transaction-level advisory lock. SQLite needs none: it has one writer at a
    time, and a transaction that read and then finds another writer's commit fails with
    "database is locked" rather than acting on what it read.
    """
    conn = connections[using]
    if on_postgresql(conn):
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [namespace, key])


def transaction_lock_and_select(
    namespace: int, key: int, sql: str, params: Sequence[Any], *, using: str
) -> tuple[Any, ...]:
    """Hold the lock (``namespace``, ``key``) until the current transaction ends, then run
    ``sql`` (a query of one row) and return its row: one round trip on PostgreSQL.

    The lock and the query go as two statements of one query string, never as one statement:
    under READ COMMITTED every statement reads a snapshot taken when it starts, so the query
    sees all that was committed before the lock was granted, where a single statement calling
    the lock would read a snapshot from before it waited (the very race the lock is there to
    close). Two statements in one string need psycopg's client-side binding, Django's default;
    with ``server_side_binding`` they go as two round trips. SQLite takes no lock (see
    ``transaction_lock``).
    """
    conn = connections[using]
    lock = "SELECT pg_advisory_xact_lock(%s, %s)"
    with conn.cursor() as cur:
        if not on_postgresql(conn):
            cur.execute(sql, params)
        elif not _client_side_binding(conn):
            cur.execute(lock, [namespace, key])
            cur.execute(sql, params)
        else:
            cur.execute(f"{lock}; {sql}", [namespace, key, *params])
            while cur.nextset():  # the lock's row first; the query's is the last result
                pass
        return tuple(cur.fetchone())


def try_transaction_lock(key: int) -> bool:
    """Try to take the lock ``key`` until the current transaction ends; True when taken.

    PostgreSQL: a transaction-level advisory lock. SQLite serializes writers with its
    IMMEDIATE transactions, so there the answer is always yes.
    """
    if not on_postgresql():
        return True
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [key])
        return bool(cur.fetchone()[0])


# ---------------------------------------------------------------------------------------------
# Many rows in one statement
# ---------------------------------------------------------------------------------------------
def upsert_rows(
    model: type[Model], rows: Sequence[dict[str, Any]], *, unique: str, update: Sequence[str]
) -> None:
    """Insert ``rows`` (dicts of field attnames), or update ``update`` where ``unique`` exists.

    PostgreSQL: ``INSERT … SELECT FROM jsonb_to_recordset(%s) ON CONFLICT DO UPDATE``, the same
    upsert as ``bulk_create(update_conflicts=True)`` at a fraction of its CPU (one parameter,
    no model instances, no per-field compilation). Elsewhere: that ``bulk_create``.
    """
    if not rows:
        return
    if not on_postgresql():
        model._default_manager.bulk_create(
            [model(**row) for row in rows],
            update_conflicts=True,
            unique_fields=[unique],
            update_fields=list(update),
        )
        return
    meta = model._meta
    qn = connection.ops.quote_name
    fields = [meta.get_field(name) for name in [unique, *update]]
    column = {name: meta.get_field(name).column for name in rows[0]}
    typed = ", ".join(f"{qn(f.column)} {f.db_type(connection)}" for f in fields)
    names = ", ".join(qn(f.column) for f in fields)
    sets = ", ".join(f"{qn(f.column)} = EXCLUDED.{qn(f.column)}" for f in fields[1:])
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {qn(meta.db_table)} ({names}) "  # noqa: S608 - names from the model
            f"SELECT {names} FROM jsonb_to_recordset(%s::jsonb) AS v({typed}) "
            f"ON CONFLICT ({qn(fields[0].column)}) DO UPDATE SET {sets}",
            [json.dumps([{column[k]: v for k, v in row.items()} for row in rows], default=str)],
        )


# ---------------------------------------------------------------------------------------------
# Inserting new rows
# ---------------------------------------------------------------------------------------------
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


M = TypeVar("M", bound=Model)


_IMMUTABLE = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class _BuildPlan:
    """How :func:`model_build` fills a model's fields."""

    names: dict[str, tuple[str, bool]]
    """Each field's name and attname -> (attname, whether a value by that name is an object)."""
    static: dict[str, Any]
    """attname -> default, for the fields whose default is one immutable value."""
    dynamic: list[tuple[str, str, Callable[[], Any]]]
    """(attname, name, default maker) for the others (``uuid4``, ``dict``, ``now``…)."""


@functools.cache
def _build_plan(model: type[Model]) -> _BuildPlan:
    names: dict[str, tuple[str, bool]] = {}
    static: dict[str, Any] = {}
    dynamic: list[tuple[str, str, Callable[[], Any]]] = []
    for f in model._meta.concrete_fields:
        names[f.attname] = (f.attname, False)
        names[f.name] = (f.attname, f.is_relation)
        default = f.default if f.has_default() else f.get_default()
        if not callable(default) and isinstance(default, _IMMUTABLE):
            static[f.attname] = default
        else:
            dynamic.append((f.attname, f.name, f.get_default))
    return _BuildPlan(names, static, dynamic)


def model_build(model: type[M], **values: Any) -> M:
    """``model(**values)``, unsaved, without ``Model.__init__``'s per-field descriptor work.

    A batch of 1,000 jobs builds 2,000 instances of models with up to 63 fields, and
    ``__init__`` was a third of the batch's CPU. This sets the same attributes: each field's
    default (callables such as ``uuid4`` run per instance), then the values given, a relation
    given as an object by its name as its id plus the cached object, as the related descriptor
    does. No ``pre_init``/``post_init`` signals are sent (no app here listens to them for the
    models built this way)."""
    plan = _build_plan(model)
    obj = model.__new__(model)
    state = obj._state = models.base.ModelState()
    attrs = obj.__dict__
    attrs.update(plan.static)
    for attname, name, make in plan.dynamic:
        if attname not in values and name not in values:
            attrs[attname] = make()
    for name, value in values.items():
        try:
            attname, by_object = plan.names[name]
        except KeyError:
            raise TypeError(f"{model.__name__}() got an unexpected keyword '{name}'") from None
        if by_object:
            attrs[attname] = None if value is None else value.pk
            state.fields_cache[name] = value
        else:
            attrs[attname] = value
    return obj


@functools.cache
def row_format(
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
    fields_, readers = row_format(type(obj), connection.vendor, skip)
    for f, read in zip(fields_, readers, strict=True):
        value = read(obj, connection)
        if isinstance(value, DatabaseDefault):
            continue
        columns.append(connection.ops.quote_name(f.column))
        values.append(value)
    return columns, values


def int_array(values: Iterable[int | None]) -> str:
    """A PostgreSQL array literal (``{1,2,NULL}``) of integers, sent as one text parameter and
    cast in the SQL (``%s::bigint[]``).

    psycopg adapts a Python list element by element in Python: 9,000 ids cost about four times
    the client CPU of this text (``bench/micro_bench.py``, "ids")."""
    items = list(values)
    if None in items:
        return "{" + ",".join("NULL" if v is None else str(v) for v in items) + "}"
    return "{" + ",".join(map(str, items)) + "}"


def _literal(value: Any) -> str | None:
    """The SQL literal of a value that is the same for most rows (NULL, '', 0, true, false),
    or None for one sent as a parameter.

    A job row has 63 columns, most of them empty when it is new. psycopg parses a query's
    placeholders again on every execute once it has more than 50 parameters (its cache holds
    only smaller ones), a tenth of a REST submit's CPU; with the empty values written into the
    SQL the insert keeps under 50, and the few shapes of query string that result are cached."""
    if value is None:
        return "NULL"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int and value == 0:
        return "0"
    if type(value) is str and not value:
        return "''"
    return None


def _marks(values: Sequence[Any], casts: Sequence[str] | None = None) -> tuple[str, list[Any]]:
    """``values``' placeholders (each ``%s``, or its cast from ``casts``) for a VALUES or SELECT
    list, the empty ones written as literals (:func:`_literal`), and the values still sent."""
    marks, sent = [], []
    for i, value in enumerate(values):
        mark = casts[i] if casts is not None else "%s"
        literal = _literal(value)
        if literal is None:
            sent.append(value)
        else:
            mark = mark.replace("%s", literal)
        marks.append(mark)
    return ", ".join(marks), sent


def insert_with_child(parent: Model, child: Model, *, fk: str) -> None:
    """INSERT ``parent`` and ``child`` (whose foreign key ``fk`` points at it) together.

    PostgreSQL: one statement, a data-modifying CTE: one round trip, atomic by itself, where
    ``save()`` twice inside ``atomic()`` costs four (BEGIN, two INSERTs, COMMIT) and the ORM's
    save machinery twice. Inside a caller's transaction it runs in a savepoint, so a lost race
    on a unique key leaves that transaction usable. SQLite has no data-modifying CTEs: two
    plain inserts in one transaction.
    """
    model, child_model = type(parent), type(child)
    alias = router.db_for_write(model)
    conn = connections[alias]
    if not on_postgresql(conn):
        with transaction.atomic(using=alias):
            parent.save(force_insert=True, using=alias)
            setattr(child, fk, parent)
            child.save(force_insert=True, using=alias)
        return
    link = child_model._meta.get_field(fk)
    parent_columns, parent_values = _insert_values(parent, conn)
    child_columns, child_values = _insert_values(child, conn, skip=link.attname)
    qn = conn.ops.quote_name
    pk, child_fk = qn(model._meta.pk.column), qn(link.column)
    parent_table, child_table = qn(model._meta.db_table), qn(child_model._meta.db_table)
    columns, (marks, parent_sent) = ", ".join(parent_columns), _marks(parent_values)
    insert_parent = f"INSERT INTO {parent_table} ({columns}) VALUES ({marks}) RETURNING {pk}"  # noqa: S608
    columns, (marks, child_sent) = ", ".join(child_columns), _marks(child_values)
    insert_child = f"INSERT INTO {child_table} ({child_fk}, {columns})"
    child_row = f"VALUES ((SELECT {pk} FROM p), {marks}) RETURNING {child_fk}"  # noqa: S608
    sql = f"WITH p AS ({insert_parent}) {insert_child} {child_row}"
    savepoint = transaction.atomic(using=alias) if conn.in_atomic_block else nullcontext()
    with savepoint, conn.cursor() as cursor:
        cursor.execute(sql, [*parent_sent, *child_sent])
        (parent.pk,) = cursor.fetchone()
    for obj in (parent, child):
        obj._state.adding, obj._state.db = False, alias
    setattr(child, fk, parent)


def _client_side_binding(conn: Any) -> bool:
    """Whether ``conn`` sends a query string with its values merged in (Django's default for
    psycopg 3), which is what lets one string hold several statements."""
    return conn.settings_dict.get("OPTIONS", {}).get("server_side_binding") is not True


_CASTS: dict[tuple[type[Model], str, str], list[str]] = {}


def _casts(model: type[Model], conn: Any, skip: str = "") -> list[str]:
    """``%s::<type>`` per column of ``row_format(model, …)``: the type a value is cast to in a
    SELECT list, where an untyped literal would be text. Character columns take text, so too
    long a value fails on assignment as in VALUES, rather than being cut short by a cast to
    ``varchar(n)``. Worked out once per model and vendor."""
    key = (model, conn.vendor, skip)
    if key not in _CASTS:
        casts = []
        for f in row_format(model, conn.vendor, skip)[0]:
            db_type = f.cast_db_type(conn) or "text"
            text = db_type.startswith(("varchar", "char"))
            casts.append("%s::text" if text else f"%s::{db_type}")
        _CASTS[key] = casts
    return _CASTS[key]


def insert_with_child_if(
    parent: Model,
    child: Model,
    *,
    fk: str,
    lock: tuple[int, int],
    guard: str,
    params: Sequence[Any],
) -> tuple[Any, ...]:
    """Under the transaction lock ``lock``, run ``guard`` (a query of one row whose first
    column says whether to insert) and INSERT ``parent`` and ``child`` (as
    ``insert_with_child``) only where it says so; returns the guard's row.

    PostgreSQL (client-side binding, the default): all of it in one round trip, as two
    statements of one query string: the lock, then one statement that reads the guard and
    inserts. Outside a transaction the statements of one string run as one (the lock lasts to
    its end); each reads a snapshot taken when it starts, so the guard sees every commit made
    before the lock was granted. Inside a caller's transaction it runs in a savepoint, as
    ``insert_with_child`` does. Elsewhere: the lock, the guard and the insert one after another
    inside ``atomic()``.
    """
    model, child_model = type(parent), type(child)
    alias = router.db_for_write(model)
    conn = connections[alias]
    if not (on_postgresql(conn) and _client_side_binding(conn)):
        with transaction.atomic(using=alias):
            row = transaction_lock_and_select(*lock, guard, params, using=alias)
            if row[0]:
                insert_with_child(parent, child, fk=fk)
        return row
    link = child_model._meta.get_field(fk)
    qn = conn.ops.quote_name
    pk, child_fk = qn(model._meta.pk.column), qn(link.column)

    def select_list(obj: Model, skip: str = "") -> tuple[str, str, list[Any]]:
        columns, casts, values = [], [], []
        fields_, readers = row_format(type(obj), conn.vendor, skip)
        typed = _casts(type(obj), conn, skip)
        for f, read, cast in zip(fields_, readers, typed, strict=True):
            value = read(obj, conn)
            if isinstance(value, DatabaseDefault):
                continue
            columns.append(qn(f.column))
            casts.append(cast)
            values.append(value)
        marks, sent = _marks(values, casts)
        return ", ".join(columns), marks, sent

    parent_columns, parent_casts, parent_values = select_list(parent)
    child_columns, child_casts, child_values = select_list(child, link.attname)
    parent_table, child_table = qn(model._meta.db_table), qn(child_model._meta.db_table)
    sql = (
        "SELECT pg_advisory_xact_lock(%s, %s); "  # noqa: S608 - names and placeholders only
        f"WITH g AS ({guard}), "
        f"p AS (INSERT INTO {parent_table} ({parent_columns}) "
        f"SELECT {parent_casts} FROM g WHERE g.ok RETURNING {pk}), "
        f"c AS (INSERT INTO {child_table} ({child_fk}, {child_columns}) "
        f"SELECT p.{pk}, {child_casts} FROM p) "
        f"SELECT g.*, (SELECT {pk} FROM p) FROM g"
    )
    savepoint = transaction.atomic(using=alias) if conn.in_atomic_block else nullcontext()
    with savepoint, conn.cursor() as cursor:
        cursor.execute(sql, [*lock, *params, *parent_values, *child_values])
        while cursor.nextset():  # the lock's row first; the insert's is the last result
            pass
        *row, parent_pk = cursor.fetchone()
    if row[0]:
        parent.pk = parent_pk
        for obj in (parent, child):
            obj._state.adding, obj._state.db = False, alias
        setattr(child, fk, parent)
    return tuple(row)


def insert_rows(parents: list[Model], children: list[Model], *, fk: str) -> None:
    """Insert unsaved ``parents`` and one child each (whose foreign key ``fk`` points at its
    parent); call inside a transaction.

    PostgreSQL: the parents' ids from their sequence in one query, then one COPY per table,
    which costs a fraction of the CPU of ``bulk_create`` (which prepares every value of every
    row through its field and has psycopg quote them all into one statement). Elsewhere, or
    once a column has a database default (COPY cannot say DEFAULT per row), ``bulk_create``.
    """
    model, child_model = type(parents[0]), type(children[0])
    alias = router.db_for_write(model)
    conn = connections[alias]
    copyable = on_postgresql(conn) and not any(
        f.has_db_default() for m in (model, child_model) for f in m._meta.local_concrete_fields
    )
    if not copyable:
        model._default_manager.using(alias).bulk_create(parents)
        for parent, child in zip(parents, children, strict=True):
            setattr(child, fk, parent)
        child_model._default_manager.using(alias).bulk_create(children)
        return
    table = conn.ops.quote_name(model._meta.db_table)
    with conn.cursor() as cursor, conn.wrap_database_errors:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [table, model._meta.pk.column, len(parents)],
        )
        for parent, child, (pk,) in zip(parents, children, cursor.fetchall(), strict=True):
            parent.pk = pk
            setattr(child, fk, parent)
        _copy_rows(conn, cursor, model, parents)
        _copy_rows(conn, cursor, child_model, children)
    for parent in parents:
        parent._state.adding, parent._state.db = False, alias


def _copy_rows(conn: Any, cursor: Any, model: type[Model], objs: Sequence[Model]) -> None:
    """COPY unsaved instances into ``model``'s table, their primary keys included if set."""
    qn = conn.ops.quote_name
    columns, readers = row_format(model, conn.vendor)
    with_pk = objs[0].pk is not None
    names = [qn(model._meta.pk.column)] * with_pk + [qn(f.column) for f in columns]
    sql = f"COPY {qn(model._meta.db_table)} ({', '.join(names)}) FROM STDIN"
    with cursor.cursor.copy(sql) as copy:
        for obj in objs:
            row = [read(obj, conn) for read in readers]
            copy.write_row([obj.pk, *row] if with_pk else row)
