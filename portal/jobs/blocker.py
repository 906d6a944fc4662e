"""Why a queued job waits, as pages and the API lead with it: the blocker that matters first.

The scheduling cycle stores, per queued job, the engine's note for every candidate model
(``JobWait.notes``, shared by equal waits: ``[model, code, message, kind]``) and the
closest candidate (``JobWait.model``). This module only arranges what the cycle stored:
the closest candidate the job could get with its reason and numbers, then each other eligible
candidate with its own, then one line for the candidates that can never take the job. Nothing
here reads the database but the notes of a job loaded without them (lists load them with it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ObjectDoesNotExist

from portal import hooks

# How the never-fitting codes are said in the summary line.
NEVER_WORDS = {
    "REQUIREMENT_NOT_MET": "requirement not met",
    "NOT_IN_CATALOG": "not in the catalog",
    "SLICE_NOT_NAMED": "MIG slice, used only when named",
    "TOO_LARGE": "gang larger than any of its clusters",
    "NO_ENABLED_CLUSTER": "in no cluster",
}


# What each pending reason code means, in plain words: the head of the one sentence a waiting
# job shows (the code itself stays in the API and in the sentence's tooltip). One cause, one
# code: the candidate notes' codes (QUOTA_FULL …) are not shown beside these.
PLAIN: dict[str, str] = {
    "TEAM_HELD": "An admin holds the team's queue",
    "INVALID_JOB": "It cannot be scheduled as it is",
    "NO_MODEL_MATCHES": "No GPU model matches what it asks for",
    "JOB_TOO_LARGE": "It is larger than any cluster can ever hold",
    "NO_ENABLED_CLUSTER": "No cluster that has its GPU model takes work now",
    "CLUSTER_DRAINING": "The clusters with its GPU model are draining",
    "CLUSTER_UNREACHABLE": "The clusters with its GPU model cannot be reached",
    "QUOTA_EXHAUSTED": "Its team's quota is in use",
    "COHORT_HAS_NOTHING_TO_LEND": "Other teams have too little idle quota to lend",
    "NO_CAPACITY": "No GPUs that fit it are free now",
    "WAITING_BEHIND": "Jobs ahead of it in line took the free GPUs",
    "CAPACITY_HELD": "The free GPUs are held for an older job",
    "HOLDING_CAPACITY": "GPUs are being set aside for it",
    "PREEMPTING": "Jobs on borrowed quota are being stopped to make room for it",
    "NOT_CONSIDERED": "It is too far back in its team's line to be looked at yet",
    "MIN_RUNTIME": "The jobs that would make room must first reach their minimum runtime",
    "PREEMPTION_BUDGET": "Making room would stop more jobs than one cycle may",
}


def blocker_sentence(code: str, message: str) -> str:
    """One sentence for a waiting job: the code's plain words, then the numbers of the
    cycle's message ("Its team's quota is in use: needs 4 × A100-80GB; team quota full: 2
    more than the team may use (…)."). Before a cycle: that it waits for one."""
    if not code:
        return "Waiting for the next scheduling cycle."
    head = PLAIN.get(code, code.replace("_", " ").capitalize())
    text = f"{head}: {message}" if message else head
    return text if text.endswith(".") else f"{text}."


@dataclass(frozen=True, slots=True)
class CandidateLine:
    """One candidate model and why it does not take the job now."""

    model: str
    code: str
    message: str
    """The engine's note, e.g. ``"A100-80GB: no node with 4 free (largest free block 2, …)"``."""

    @property
    def label(self) -> str:
        """The model as the note names it (``"A100-80GB"``)."""
        head, sep, _ = self.message.partition(": ")
        return head if sep else self.model

    @property
    def detail(self) -> str:
        """The note without its model label."""
        _, sep, rest = self.message.partition(": ")
        return rest if sep else self.message

    def as_dict(self) -> dict[str, str]:
        return {"model": self.model, "code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class Blocker:
    """A queued job's wait, arranged blocker first."""

    code: str
    """The cycle's reason code (``NO_CAPACITY``, ``QUOTA_EXHAUSTED`` …); '' before a cycle."""
    message: str
    """The cycle's whole message (``"needs 4 × A100-80GB; …"``)."""
    model: str
    """Closest candidate the job could get ('' when none could, or before a cycle)."""
    lead: CandidateLine | None
    """That candidate's note: the blocker that matters."""
    others: tuple[CandidateLine, ...] = ()
    """Every other eligible candidate, in the order the policy tries them."""
    never: tuple[CandidateLine, ...] = ()
    """Candidates that can never take the job (requirement, catalog, MIG rule, size, absent)."""
    never_summary: str = ""
    """One line for ``never``, e.g. ``"3 models can never take it: T4, L4 (requirement not
    met); H100-MIG-1g.10gb (MIG slice, used only when named)"``."""

    @property
    def sentence(self) -> str:
        """The one sentence a page, the CLI and the API lead with (:func:`blocker_sentence`)."""
        return blocker_sentence(self.code, self.message)

    @property
    def lead_repeats_message(self) -> bool:
        """Whether the closest candidate's note only says again what the sentence says."""
        return self.lead is not None and self.lead.detail in self.message

    def as_dict(self) -> dict[str, Any]:
        """The API's ``blocker`` object."""
        return {
            "code": self.code,
            "sentence": self.sentence,
            "message": self.message,
            "model": self.model or None,
            "lead": self.lead.as_dict() if self.lead else None,
            "others": [c.as_dict() for c in self.others],
            "never": [c.as_dict() for c in self.never],
            "never_summary": self.never_summary,
        }


def never_summary(never: Sequence[CandidateLine]) -> str:
    """One line for the candidates that can never fit, grouped by why (first seen first)."""
    if not never:
        return ""
    groups: dict[str, list[str]] = {}
    for c in never:
        groups.setdefault(NEVER_WORDS.get(c.code, c.code.lower().replace("_", " ")), []).append(
            c.label
        )
    parts = "; ".join(f"{', '.join(labels)} ({why})" for why, labels in groups.items())
    n = len(never)
    return f"{n} model{'s' if n != 1 else ''} can never take it: {parts}"


def job_blocker(*, code: str, message: str, model: str, candidates: Any) -> Blocker:
    """Arrange the stored notes. Tolerates rows written before notes were stored (plain
    ``[]``) and anything malformed in the JSON (skipped: a page must still render)."""
    lead: CandidateLine | None = None
    others: list[CandidateLine] = []
    never: list[CandidateLine] = []
    for row in candidates if isinstance(candidates, list) else ():
        if not (isinstance(row, list) and len(row) == 4 and all(isinstance(x, str) for x in row)):
            continue
        line = CandidateLine(row[0], row[1], row[2])
        kind = row[3]
        if kind == "never":
            never.append(line)
        elif kind == "lead" and lead is None:
            lead = line
        else:
            others.append(line)
    return Blocker(
        code=code,
        message=message,
        model=model,
        lead=lead,
        others=tuple(others),
        never=tuple(never),
        never_summary=never_summary(never),
    )


def blocker_of(job: Any) -> Blocker | None:
    """The blocker of a queued job (None for a job in any other state)."""
    if job.state != "QUEUED":
        return None
    return job_blocker(
        code=job.pending_reason_code,
        message=job.pending_reason,
        model=job.pending_model,
        candidates=notes_of(job),
    )


def notes_of(job: Any) -> Any:
    """The job's stored notes ([] when it has none, or they were pruned meanwhile)."""
    try:
        notes = job.pending_notes  # loaded with the job by list pages (select_related)
    except ObjectDoesNotExist:
        return []
    return notes.notes if notes is not None else []


@dataclass(frozen=True, slots=True)
class StartRange:
    """The likely range of a queued job's start (``dashboards.models.StartEstimateRecord``,
    written by the estimate refresh): between ``earliest`` and ``latest``, learned from
    ``runs`` comparable finished runs; ``unknown`` when it waits on a running job that has
    outlived what was learned."""

    earliest: dt.datetime | None
    latest: dt.datetime | None
    runs: int
    unknown: bool


CONFIDENCE = 0.9
"""The share of starts the shown range holds: ``bench/estimate_bench.py`` measured 89 % (the
synthetic trace) and 95 % (the production trace) of the starts of jobs that waited;
``/pool/estimates/`` measures it on this pool's own starts."""


@dataclass(frozen=True, slots=True)
class SimulatedStart:
    """The start estimate the cycle's queue simulation stored on the job
    (``scheduling.estimates``): when, on which model and cluster, and why it may move."""

    at: dt.datetime | None
    basis: str
    model: str = ""
    cluster: str = ""
    source: str = "simulation"
    range: StartRange | None = None
    now: dt.datetime | None = None

    @property
    def summary(self) -> str:
        return range_words(self.at, self.range, self.now or dt.datetime.now(dt.UTC))

    @property
    def unknown(self) -> bool:
        return range_unknown(self.at, self.range, self.now or dt.datetime.now(dt.UTC))


def _hm(t: dt.datetime, now: dt.datetime) -> str:
    """``17:40 UTC`` today, ``Tue 17:40 UTC`` within a week, else the date."""
    t = t.astimezone(dt.UTC)
    if t.date() == now.astimezone(dt.UTC).date():
        return f"{t:%H:%M} UTC"
    if t - now < dt.timedelta(days=6):
        return f"{t:%a %H:%M} UTC"
    return f"{t:%Y-%m-%d %H:%M} UTC"


def range_unknown(at: dt.datetime | None, r: StartRange | None, now: dt.datetime) -> bool:
    """Whether the start is unknown: it waits on a running job that has outlived what was
    learned, or it is still queued after the latest the range allowed."""
    if r is None or at is None:
        return False
    return r.unknown or (r.latest is not None and r.latest < now)


def range_words(at: dt.datetime | None, r: StartRange | None, now: dt.datetime) -> str:
    """ "between 17:40 and 19:10 UTC, most likely 18:05 UTC; 12 comparable runs", never a time
    in the past (what has passed is "now"), or "unknown …" and why; empty without an
    estimate."""
    if at is None:
        return ""
    likely = max(at, now)
    if r is None or r.earliest is None or r.latest is None:
        return "now" if likely <= now else f"most likely {_hm(likely, now)}"
    runs = (
        f"{r.runs} comparable run{'s' if r.runs != 1 else ''}"
        if r.runs
        else "no comparable runs yet, so a wide range"
    )
    if r.unknown:
        return (
            f"unknown: it waits on a running job that has run longer than its comparable runs; "
            f"at the latest by {_hm(r.latest, now)} (its max runtime)"
        )
    if r.latest < now:
        return "unknown: it is still waiting past the latest time estimated"
    earliest = max(r.earliest, now)
    if r.latest <= now + dt.timedelta(minutes=1):
        return "now"
    first = "now" if earliest <= now else _hm(earliest, now)
    return (
        f"between {first} and {_hm(r.latest, now)}, most likely "
        f"{'now' if likely <= now else _hm(likely, now)} "
        f"(about {round(CONFIDENCE * 10)} in 10 starts fall in such a range); {runs}"
    )


def stored_start(job: Any, ranges: Mapping[int, Any], now: dt.datetime) -> SimulatedStart:
    """The estimate the last refresh stored on ``job``, with its range from ``ranges`` (by job
    pk, as ``portal.hooks.estimate_ranges`` answers for a list)."""
    return SimulatedStart(
        at=job.estimated_start_at,
        basis=job.estimate_note,
        model=job.estimate_model,
        cluster=job.estimate_cluster,
        range=ranges.get(job.pk),
        now=now,
    )


def start_estimate(job: Any, now: dt.datetime) -> Any:
    """A queued job's start estimate (None for any other state): the one the refresh after
    each cycle stored on the job, with its likely range, or, before one is stored, the same
    simulation run for this job alone (``portal.hooks.start_estimate``)."""
    if job.state != "QUEUED":
        return None
    if job.estimate_updated_at is not None:
        # The range lives with the estimate records (``dashboards``), which the portal may
        # not import: it answers ``portal.hooks.estimate_ranges``.
        return stored_start(job, hooks.estimate_ranges.ask([job.pk]) or {}, now)
    # The simulation lives in ``scheduling``, which the portal may not import: it answers
    # ``portal.hooks.start_estimate``.
    return hooks.start_estimate.ask(job, now)


def estimate_dict(estimate: Any, now: dt.datetime | None = None) -> dict[str, Any] | None:
    """A start estimate as the API's ``start_estimate`` object."""
    if estimate is None:
        return None
    r = getattr(estimate, "range", None)
    now = now or dt.datetime.now(dt.UTC)

    def iso(t: dt.datetime | None) -> str | None:
        return t.isoformat().replace("+00:00", "Z") if t else None

    return {
        "at": iso(estimate.at),
        "source": estimate.source,
        "basis": estimate.basis,
        "model": getattr(estimate, "model", ""),
        "cluster": getattr(estimate, "cluster", ""),
        "earliest": iso(max(r.earliest, now)) if r and r.earliest else None,
        "latest": iso(r.latest) if r else None,
        "most_likely": iso(max(estimate.at, now)) if estimate.at else None,
        "confidence": CONFIDENCE if r and r.latest else None,
        "comparable_runs": r.runs if r else None,
        "unknown": range_unknown(estimate.at, r, now),
        "summary": range_words(estimate.at, r, now),
    }
