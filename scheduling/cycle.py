"""One scheduling cycle: the I/O around the pure engine, as numbered steps.

    1. take the scheduler lock (single flight across processes)
    2. load a snapshot in a handful of queries (no per-job queries)
    3. engine.decide(snapshot)
    4. persist admissions, preemptions and pending reasons in bulk, in one transaction
    5. on commit, enqueue dispatch (admitted) and eviction (preempted) tasks
    6. on commit, ask for every queued job's start estimate to be recomputed (a task)

Everything written is guarded: admissions and preemptions are compare-and-set transitions, so a
cycle racing a cancel, or a second cycle (which the lock prevents anyway), changes nothing twice.
A crash before step 4 commits leaves every job as it was.
"""

from __future__ import annotations

import datetime as dt
import gc
import hashlib
import json
import logging
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import (
    Exists,
    OuterRef,
)
from django.utils import timezone

from portal import db, hooks
from portal.jobs.state import Change, job_transition, jobs_transition_bulk
from portal.jobs.waits import WaitRow, order_keys, waits_clear, waits_prune, waits_write
from portal.models import (
    PREEMPTIBLE_STATES,
    JobState,
    JobWait,
    PendingNotes,
)
from portal.telemetry import observe_cycle
from rules import engine
from scheduling.estimates import estimates_request
from scheduling.snapshot import Loaded, engine_config, snapshot_load

log = logging.getLogger(__name__)

# Postgres advisory lock key: "gpupool cycle" (stable across deploys; see docs/decisions.md).
CYCLE_LOCK_KEY = 0x67707031  # "gpp1"


@dataclass
class CycleResult:
    ran: bool
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    pending: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# 1. The lock
# ---------------------------------------------------------------------------------------------
def scheduler_lock() -> AbstractContextManager[bool]:
    """Yield True if this process holds the scheduler lock, False if another one does: a
    session advisory lock on PostgreSQL (it goes with a killed worker's connection), a
    ``flock`` next to the database on SQLite (``portal.db.exclusive_lock``)."""
    return db.exclusive_lock(CYCLE_LOCK_KEY, Path(settings.VAR_DIR) / "scheduler.lock")


# 2. The snapshot: ``scheduling.snapshot.snapshot_load``. 3. The decision: ``engine.decide``.


# ---------------------------------------------------------------------------------------------
# 4. Persisting the decision
# ---------------------------------------------------------------------------------------------
def explanation_dict(e: engine.Explanation) -> dict[str, Any]:
    return {
        "model": e.model,
        "cluster": e.cluster,
        "message": e.message,
        "skipped": [
            {"model": n.model, "code": str(n.code), "message": n.message} for n in e.skipped
        ],
        "clusters": [
            {"cluster": n.cluster, "code": str(n.code), "message": n.message} for n in e.clusters
        ],
    }


def _admit(decision: engine.Decision, loaded: Loaded, now: dt.datetime) -> list[int]:
    # A share's planned devices go with it (the next cycle charges them, the manifest pins
    # them); a batch without shares leaves the column alone, as every change of a bulk
    # transition sets the same fields.
    devices = any(a.device_plan for a in decision.admissions)
    changes = [
        Change(
            job_id=loaded.job_pk[a.job_id],
            updates={
                "cluster_id": loaded.cluster_pk[a.cluster],
                "gpu_model_id": loaded.model_pk[a.model],
                "node_plan": list(a.node_plan),
                **({"device_plan": list(a.device_plan)} if devices else {}),
                "placement": {
                    **explanation_dict(a.explanation),
                    "borrowed_gpus": a.borrowed_gpus,
                    "starvation_guard": a.starvation_guard,
                },
            },
            message=a.explanation.message,
        )
        for a in decision.admissions
    ]
    won = jobs_transition_bulk(
        changes=changes, expected=JobState.QUEUED, to=JobState.ADMITTED, reason="Admitted", now=now
    )
    admitted = [c.job_id for c in changes if c.job_id in won]
    waits_clear(admitted)
    return admitted


def _preempt(decision: engine.Decision, loaded: Loaded, now: dt.datetime) -> list[int]:
    """Each victim's own compare-and-set, in id order: the cycle's transaction holds them all
    until it commits, and locks taken in the engine's order could meet a writer that locks
    the same running jobs in the one global order (``portal.jobs.rowlock``)."""
    victims = sorted(
        (
            (pk, p.message)
            for p in decision.preemptions
            if (pk := loaded.job_pk.get(p.job_id)) is not None
        ),
        key=lambda victim: victim[0],
    )
    preempted = []
    for pk, message in victims:
        if job_transition(
            job_id=pk,
            expected=PREEMPTIBLE_STATES,
            to=JobState.PREEMPTING,
            reason="Preempted",
            message=message,
            now=now,
        ):
            preempted.append(pk)
    return preempted


# Candidate notes a job can never turn into a placement, whatever runs or ends: the
# requirement rules the model out, or the gang is larger than any cluster of it holds.
_NEVER = frozenset(
    {
        engine.SkipCode.NOT_IN_CATALOG,
        engine.SkipCode.REQUIREMENT_NOT_MET,
        engine.SkipCode.SLICE_NOT_NAMED,
        engine.SkipCode.KIND_MISMATCH,
        engine.SkipCode.TOO_LARGE,
    }
)
_NOT_A_BLOCKER = frozenset({engine.SkipCode.FALLBACK_NOT_ALLOWED, engine.SkipCode.NOT_TRIED})

ReasonRow = tuple[int, str, str, int, str | None, str]
"""(job pk, code, message, order key, key of its candidate notes, closest candidate's model)."""


def candidate_rows(
    notes: tuple[engine.CandidateNote, ...], present: frozenset[str]
) -> tuple[list[list[str]], str]:
    """The engine's notes as stored (``PendingNotes.notes``), ``[model, code, message, kind]``
    in its order, and the closest candidate's model ('' when none could ever take the job).

    ``kind``: ``lead`` for the candidate closest to running (the engine puts it first among
    the ones it tried: the blocker that matters), ``other`` for each other eligible one,
    ``never`` for one that can never fit: the requirement rules it out, the gang is too large
    for it, or no cluster has the model at all (``present``: models with nodes somewhere; a
    model whose clusters are draining or disabled is eligible, it may come back).
    """
    rows: list[list[str]] = []
    lead = ""
    for n in notes:
        code = n.code
        absent = code is engine.SkipCode.NO_ENABLED_CLUSTER and n.model not in present
        if code in _NEVER or absent:
            kind = "never"
        elif not lead and code not in _NOT_A_BLOCKER:
            kind, lead = "lead", n.model
        else:
            kind = "other"
        rows.append([n.model, str(code), n.message, kind])
    return rows, lead


def notes_key(rows: list[list[str]]) -> str:
    """The key of a set of notes: the MD5 of their JSON (equal notes, one row)."""
    text = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


@dataclass
class Reasons:
    """What step 4 writes for the jobs left queued: their rows (changed ones only) and the
    notes those rows point at."""

    rows: list[ReasonRow]
    notes: dict[str, list[list[str]]]


def _reason_rows(decision: engine.Decision, loaded: Loaded) -> Reasons:
    present = frozenset(n.model for c in loaded.snapshot.clusters for n in c.nodes)
    # A job being helped by a preemption or holding capacity waits for one model: its own.
    waits_for = {p.for_job: p.model for p in decision.preemptions}
    waits_for.update((h.job_id, h.model) for h in decision.holds)
    # Jobs of one failure group share their notes' tuple: convert each tuple once.
    memo: dict[int, tuple[str | None, str]] = {}
    notes: dict[str, list[list[str]]] = {}
    ranked: list[tuple[int, int, str, str, str | None, str]] = []
    for r in decision.pending:
        found = memo.get(id(r.candidates))
        if found is None:
            cands, lead = candidate_rows(r.candidates, present)
            key = notes_key(cands) if cands else None
            if key is not None:
                notes[key] = cands
            found = memo[id(r.candidates)] = (key, lead)
        key, lead = found
        lead = lead or waits_for.get(r.job_id, "")
        ranked.append((r.position, loaded.job_pk[r.job_id], str(r.code), r.message, key, lead))
    not_considered = str(engine.ReasonCode.NOT_CONSIDERED)
    for nc in decision.not_considered:
        for k, job_id in enumerate(nc.job_ids):
            ranked.append(
                (nc.position_from + k, loaded.job_pk[job_id], not_considered, nc.message, None, "")
            )
    ranked.sort(key=itemgetter(0))  # by rank: the engine's pending, then those not considered
    previous = loaded.previous
    # The line as sort keys: an admission ahead changes no one's key behind it.
    keys = order_keys([previous[pk][2] if pk in previous else None for _, pk, *_ in ranked])
    rows: list[ReasonRow] = [
        (pk, code, message, order_key, notes_key_, lead)
        for (_, pk, code, message, notes_key_, lead), order_key in zip(ranked, keys, strict=True)
    ]
    changed = [row for row in rows if previous.get(row[0]) != row[1:]]
    used = {row[4] for row in changed}
    return Reasons(changed, {k: v for k, v in notes.items() if k in used})


def _write_reasons(reasons: Reasons, now: dt.datetime) -> None:
    """Notes first (one row per distinct set, kept if already there), then the reasons,
    positions and notes keys of jobs still queued, in one statement beside the job rows
    (``portal.jobs.waits``): the job rows themselves are not touched."""
    if reasons.notes:
        PendingNotes.objects.bulk_create(
            [PendingNotes(key=k, notes=v, created_at=now) for k, v in reasons.notes.items()],
            ignore_conflicts=True,
        )
    waits_write([WaitRow(*row) for row in reasons.rows])


NOTES_PRUNE_EVERY = dt.timedelta(minutes=10)
_notes_pruned_at: dict[str, dt.datetime] = {}


def notes_prune(*, now: dt.datetime, force: bool = False) -> int:
    """Delete notes no queued job points at (at most every ``NOTES_PRUNE_EVERY`` per
    database, unless ``force``); returns how many. Run under the scheduler lock, after the
    cycle's writes, so no notes a job is about to point at can go."""
    database = connection.settings_dict["NAME"]
    last = _notes_pruned_at.get(database)
    if not force and last is not None and now - last < NOTES_PRUNE_EVERY:
        return 0
    _notes_pruned_at[database] = now
    waits_prune()
    used = JobWait.objects.filter(notes_id=OuterRef("key"))
    deleted, _ = PendingNotes.objects.filter(~Exists(used)).delete()
    return deleted


def _enqueue(hook: hooks.Hook[[list[int]]], ids: list[int]) -> None:
    """Hand ids to the clusters side on commit (``portal.hooks``; without its listeners
    admissions wait in ADMITTED); nothing when there are none."""
    if ids:
        hook.fire_on_commit(ids)


# ---------------------------------------------------------------------------------------------
# The cycle
# ---------------------------------------------------------------------------------------------
@contextmanager
def collector_paused() -> Iterator[None]:
    """Keep Python's cyclic garbage collector out of one cycle's load, decide and persist.

    A cycle over 10,000 queued jobs allocates a few hundred thousand short-lived objects
    (rows, engine dataclasses, reasons) and almost no cyclic garbage, yet those allocations set
    off enough collections, each walking the worker's whole heap, to weigh on the cycle.
    Reference counting still frees everything as usual; whatever cycles the cycle leaves are
    collected once the collector is back on.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_cycle(*, now: dt.datetime | None = None) -> CycleResult:
    """Run one scheduling cycle unless another process is running one (then ``ran=False``)."""
    timings: dict[str, float] = {}
    with scheduler_lock() as got:  # 1
        if not got:
            return CycleResult(ran=False)
        now = now or timezone.now()
        config = engine_config()
        with collector_paused():
            t0 = time.perf_counter()
            loaded = snapshot_load(now=now, config=config)  # 2
            t1 = time.perf_counter()
            decision = engine.decide(loaded.snapshot, config)  # 3
            t2 = time.perf_counter()
            with transaction.atomic():  # 4
                admitted = _admit(decision, loaded, now)
                preempted = _preempt(decision, loaded, now)
                _write_reasons(_reason_rows(decision, loaded), now)
                notes_prune(now=now)
                _enqueue(hooks.admitted, admitted)  # 5
                _enqueue(hooks.preempted, preempted)
                estimates_request()  # 6
            t3 = time.perf_counter()
    timings = {"load": (t1 - t0) * 1e3, "decide": (t2 - t1) * 1e3, "persist": (t3 - t2) * 1e3}
    observe_cycle(seconds=t3 - t0)
    log.info(
        "cycle: %d admitted, %d preempted, %d pending (%s)",
        len(admitted),
        len(preempted),
        len(decision.pending),
        ", ".join(f"{k} {v:.1f} ms" for k, v in timings.items()),
    )
    return CycleResult(
        ran=True,
        admitted=admitted,
        preempted=preempted,
        pending=len(decision.pending),
        timings_ms=timings,
    )
