"""The state of one decision, in one named place: what the steps of ``core.Placement`` read
and write, and what the helpers beside it (fit, holds, preemption, wording, assemble) may see
of it.

``core.Placement`` owns the state, runs the steps and is the one place that changes it: the
helpers take it as an :class:`EngineState`, which they import from here, not from ``core``,
so the engine's modules import in one direction (core → helpers → state). They read it and
return what to do (``holds.HoldPlan``, ``preemption.PreemptionPlan``), which ``core``
applies; they write only the memos, listed in :class:`Memos`, each with what it remembers
and why it may (a memo only says again what the state already says).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from rules.engine.decision import Admission, CandidateNote, CapacityHold, ClusterNote, Preemption
from rules.engine.reasons import ReasonCode, SkipCode
from rules.engine.snapshot import (
    EngineConfig,
    GpuModel,
    PendingJob,
    RunningAllocation,
    Snapshot,
    Team,
)

if TYPE_CHECKING:
    from rules.engine.candidates import Candidates
    from rules.engine.capacity import Pool
    from rules.engine.fairshare import ShareBook
    from rules.engine.placement import Fragmentation
    from rules.engine.quota import QuotaBook


class Failure:
    """Why one candidate model did not take the job. Shared between jobs (see the memos);
    quota failures are resolved to QUOTA_FULL or COHORT_CANNOT_LEND when assembled."""

    __slots__ = ("code", "fit_at_start", "holder", "model", "notes")

    def __init__(
        self, code: SkipCode, model: GpuModel, fit_at_start: bool = False, holder: str = ""
    ) -> None:
        self.code = code
        self.model = model
        self.fit_at_start = fit_at_start
        self.holder = holder
        # Once the cycle is final: GPUs needed -> (its note, the note's rank in wording._RANK).
        self.notes: dict[int, tuple[CandidateNote, int]] = {}


class Waiting:
    """A job left pending for a reason decided and worded when it was visited (held team,
    invalid, no model, preempting, holding capacity)."""

    __slots__ = ("admitted_ahead", "ahead", "code", "detail", "job", "label", "rejected")

    def __init__(
        self,
        job: PendingJob,
        code: ReasonCode,
        ahead: int,
        admitted_ahead: int,
        label: str = "",
        detail: str = "",
        rejected: tuple[CandidateNote, ...] = (),
    ) -> None:
        self.job = job
        self.code = code
        self.ahead = ahead
        self.admitted_ahead = admitted_ahead
        self.label = label
        self.detail = detail
        self.rejected = rejected


class Victim:
    """A running allocation that could be preempted, with its node indices in its pool."""

    __slots__ = ("alloc", "nodes", "sort_key")

    def __init__(self, alloc: RunningAllocation, nodes: list[int]) -> None:
        self.alloc = alloc
        self.nodes = nodes
        # Lowest priority first, then most recently started, then id (deterministic).
        self.sort_key = (alloc.priority, -alloc.started_at.timestamp(), alloc.job_id)


Signature = tuple[object, ...]
"""(team, id(candidates), candidates tried, GPUs per replica, replicas[, the ask's tail:
devices, compute, CPU, memory, when not plain]): jobs with equal signatures are decided
alike, so the memos are per signature."""

Blocked = tuple[PendingJob, "tuple[Failure, ...]", "Candidates", int, int, int]
"""A job blocked by quota or capacity: (job, failures, candidates, candidates tried, jobs ahead,
admitted ahead). A tuple because it is made once per pending job: tens of thousands a cycle."""

Words = tuple[ReasonCode, str, tuple[CandidateNote, ...], str, str]
"""A blocked job's reason: code, message (empty for WAITING_BEHIND), candidate notes, and the
frame its message has around the detail."""


@dataclass(slots=True)
class Memos:
    """Everything one decision remembers to avoid working a thing out twice. Room and quota
    only shrink within a decision, so a failure remembered stays a failure; nothing here
    outlives the decision."""

    resolved: dict[tuple[object, ...], Candidates] = field(default_factory=dict)
    """A requirement and policy -> its candidate models (by value)."""
    quota_failed: dict[tuple[str, str], tuple[int, Failure]] = field(default_factory=dict)
    """(team, model) -> the least GPUs quota refused, with the failure."""
    cap_failed: dict[tuple[Any, ...], Failure] = field(default_factory=dict)
    """(model, GPUs, replicas[, tail]) -> no pool had room for that shape."""
    failed_sig: dict[Signature, tuple[Failure, ...]] = field(default_factory=dict)
    """A job signature -> its failures: an equal job later fails alike."""
    deferred_sig: set[Signature] = field(default_factory=set)
    """Signatures that would borrow: left for the borrowing pass of their band."""
    no_cluster: dict[str, Failure] = field(default_factory=dict)
    """Model -> its "no enabled cluster" failure."""
    preempt_failed: set[tuple[Any, ...]] = field(default_factory=set)
    """(model, GPUs, replicas, host ask) shapes no reclaim could make room for."""
    protected: dict[tuple[Any, ...], datetime | None] = field(default_factory=dict)
    """(model, GPUs, replicas, host ask) -> when protected borrowers would make room."""
    fit0: dict[tuple[str, int, int], bool] = field(default_factory=dict)
    """Whether a shape fitted the pools as the decision began."""
    ever: dict[tuple[Any, ...], bool] = field(default_factory=dict)
    """Whether a shape could ever fit a model's pools, everything running gone."""
    held_by: dict[int, str] = field(default_factory=dict)
    """id(pool) -> the first job holding capacity there."""
    quota_held_by: dict[tuple[str, str], str] = field(default_factory=dict)
    """(cohort, model) -> the job holding its quota."""
    held_models: set[str] = field(default_factory=set)
    """Models with a hold this decision (one each)."""
    cluster_notes: dict[object, ClusterNote] = field(default_factory=dict)
    """Equal numbers, one cluster note."""
    free: dict[str, tuple[int, str, int, int]] = field(default_factory=dict)
    """Model -> its free room as the wording tells it."""
    fallback_notes: dict[str, CandidateNote] = field(default_factory=dict)
    """Model -> its "fallback not allowed" note."""
    not_tried_notes: dict[str, CandidateNote] = field(default_factory=dict)
    """Model -> its "not tried, an earlier candidate fitted" note."""
    devices_of: dict[int, list[tuple[int, ...]]] = field(default_factory=dict)
    """id(pool) -> the devices planned for the admission being made there."""
    growth_of: dict[int, float] = field(default_factory=dict)
    """id(pool) -> its plan's fragmentation growth."""
    reasons: dict[int, Words] = field(default_factory=dict)
    """id(failures tuple) -> the words of a blocked job (once final)."""
    frames: dict[tuple[int, int, str, int, bool], tuple[str, str]] = field(default_factory=dict)
    """The frames of blocked jobs' messages (once final)."""


class EngineState(Protocol):
    """What the helpers beside ``core`` (fit, holds, preemption, wording, assemble) see of a
    decision."""

    snap: Snapshot
    config: EngineConfig
    quota: QuotaBook
    enabled: dict[str, list[Pool]]
    unavailable: dict[str, list[Pool]]
    victims: dict[tuple[str, str, str], list[Victim]]
    inflight: dict[tuple[str, str, str], list[Victim]]
    protected: dict[tuple[str, str, str], list[Victim]]
    holds: list[CapacityHold]
    preemptions: list[Preemption]
    preempted_gpus: int
    memos: Memos
    final: bool
    frag: Fragmentation | None
    initial_counts: dict[tuple[str, str, str], list[int]]
    """Per pool booked by counts, its nodes per free-GPU bucket as the decision began."""
    initial_general: dict[tuple[str, str, str], Pool]
    """Per pool booked per device, a copy of it as the decision began."""
    # What assembling the Decision reads (``assemble``):
    admissions: list[Admission]
    waiting: list[Waiting | Blocked]
    """A wait worded on the spot, or, on the hot path, a :data:`Blocked` tuple."""
    visited: int
    teams: dict[str, Team]
    shares: ShareBook
    share_before: dict[str, float]
    beyond: dict[str, tuple[str, ...]]
    reuse_words: bool
    # What sorting a model's running jobs into victims reads (``victims``):
    pools: dict[tuple[str, str, str], Pool]
    running_of: Callable[[str], list[tuple[str, list[RunningAllocation]]]]

    def pool_of_node(self) -> dict[tuple[str, str, str], tuple[str, str, str]]:
        """(cluster, model, node name) -> ``Pool.key``."""

    def reclaimable(self, model: str) -> None:
        """Sort the running jobs on ``model`` into victims, in flight and protected (an
        index made when a reclaim first looks at the model, not a change of the state)."""
