"""The engine's output: what to admit, what to preempt, and why everything else waits."""

from __future__ import annotations

from dataclasses import dataclass

from rules.engine.reasons import ClusterNoteCode, PreemptionCode, ReasonCode, SkipCode
from rules.engine.snapshot import slot_setters


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateNote:
    """Why one candidate model was skipped (or not needed) for a job."""

    model: str
    """``GpuModel.key`` (or the unknown key the requirement named)."""
    code: SkipCode
    message: str
    """E.g. ``"T4: does not meet the requirement (16 GiB < 24 GiB)"``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterNote:
    """Why a cluster was not chosen for the chosen model."""

    cluster: str
    code: ClusterNoteCode
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Explanation:
    """Why an admitted job got its model and cluster: shown on the job page and in the API."""

    model: str
    """Chosen ``GpuModel.key``."""
    cluster: str
    """Chosen ``Cluster.id``."""
    message: str
    """One sentence, e.g. ``"admitted on 2 x T4 in east (cheapest candidate that fits; ...)"``."""
    skipped: tuple[CandidateNote, ...] = ()
    """Every candidate other than the chosen one, in policy order, with its reason; models of
    the catalog the requirement rejects come first."""
    clusters: tuple[ClusterNote, ...] = ()
    """The other clusters with the chosen model and why they lost."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """Admit a job: reserve quota and capacity on one cluster and one model.

    The cycle persists it as QUEUED → ADMITTED (compare-and-set) with cluster and model.
    """

    job_id: str
    team: str
    cluster: str
    """``Cluster.id``."""
    model: str
    """``GpuModel.key``."""
    gpus_per_replica: int
    node_plan: tuple[str, ...]
    """Node name for each replica, index = replica number; a node may appear more than once.
    A feasibility witness: Volcano does the binding, but the cycle should charge these nodes
    until the pods are bound."""
    borrowed_gpus: int
    """GPUs of this job above the team's nominal quota at admission (0 = fully on nominal)."""
    explanation: Explanation
    starvation_guard: bool = False
    """Admitted as a head of line past the starvation guard (capacity may have been held for
    it in earlier cycles)."""
    device_plan: tuple[str, ...] = ()
    """For a share on nodes that book devices: the device of each replica, index = replica
    number (its UUID when the node reported one, else its index on the node; several devices
    of one replica joined by ``+``). Empty for whole GPUs and slices. The manifest pins it
    where the sharing mode allows (HAMi); the cycle charges it until the pods are bound."""

    @property
    def on_borrowed_quota(self) -> bool:
        return self.borrowed_gpus > 0

    @property
    def gpus(self) -> int:
        return len(self.node_plan) * self.gpus_per_replica


@dataclass(frozen=True, slots=True, kw_only=True)
class Preemption:
    """Preempt a running job; the cycle moves it to PREEMPTING (→ QUEUED, same submit time)."""

    job_id: str
    """The victim."""
    team: str
    """The victim's team."""
    cluster: str
    model: str
    for_job: str
    """The pending job on whose behalf it is preempted."""
    for_team: str
    code: PreemptionCode
    message: str
    """For the victim's event, e.g. ``"preempted: ran on A100 quota team b had borrowed; ..."``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingReason:
    """Why a considered job stays queued, and where it stands in line."""

    job_id: str
    team: str
    code: ReasonCode
    message: str
    """Human message with the numbers, e.g. ``"needs 8 x A100-80GB; team quota full: ..."``."""
    position: int
    """1-based rank among the jobs left pending, in the order this cycle considered them."""
    candidates: tuple[CandidateNote, ...] = ()
    """Per candidate model, why it did not fit (requirement rejections first)."""


_PR = slot_setters(PendingReason, ("job_id", "team", "code", "message", "position", "candidates"))


def pending_reason(
    job_id: str,
    team: str,
    code: ReasonCode,
    message: str,
    position: int,
    candidates: tuple[CandidateNote, ...],
) -> PendingReason:
    """``PendingReason(...)`` without the frozen dataclass's ``__init__``, for the tens of
    thousands the engine makes per cycle: the generated ``__init__`` goes through
    ``object.__setattr__`` per field, about three times slower than the slot setters. Equal to
    the keyword construction (tests/scheduling/engine/test_fast_paths.py checks it)."""
    r: PendingReason = object.__new__(PendingReason)
    s_job, s_team, s_code, s_message, s_position, s_candidates = _PR
    s_job(r, job_id)
    s_team(r, team)
    s_code(r, code)
    s_message(r, message)
    s_position(r, position)
    s_candidates(r, candidates)
    return r


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityHold:
    """What the starvation guard holds for a starving job this cycle: free GPUs on nodes it
    will use, and the cohort's lendable quota it needs to borrow. No job behind it in line may
    use either (jobs within their own nominal quota still may: nominal is guaranteed)."""

    job_id: str
    team: str
    cluster: str
    """Cluster of the held nodes ('' when only quota is held)."""
    model: str
    nodes: tuple[tuple[str, int], ...] = ()
    """(node name, GPUs held there)."""
    cohort_gpus: int = 0
    """GPUs of the cohort's lendable quota on ``model`` held for the job."""

    @property
    def gpus(self) -> int:
        """GPUs held on nodes."""
        return sum(n for _, n in self.nodes)


@dataclass(frozen=True, slots=True, kw_only=True)
class NotConsidered:
    """A team's queued jobs beyond the lookback: not considered this cycle.

    Position of the k-th job (0-based) of ``job_ids`` is at least ``position_from + k``; jobs the
    cycle did not load (``unloaded``) follow them. One record per team keeps the cost of a deep
    queue to a tuple slice.
    """

    team: str
    job_ids: tuple[str, ...]
    """Jobs passed in ``Snapshot.pending`` beyond the lookback, in team order."""
    unloaded: int
    """``Backlog.count`` for the team: queued jobs not even in the snapshot."""
    position_from: int
    """Lower bound of the first such job's position."""
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TeamShare:
    """A team's weighted dominant share before and after the cycle (for dashboards)."""

    team: str
    weight: float
    dominant_model: str
    """``GpuModel.key`` of the team's largest allocation share after the cycle ('' if none)."""
    allocation_share: float
    """max over models of allocated GPUs / pool GPUs of that model, after the cycle."""
    usage_share: float
    """Decayed weighted GPU-hours / what the whole pool delivers over the decay horizon."""
    share_before: float
    """(allocation share + usage_weight x usage share) / weight at the start of the cycle."""
    share_after: float
    """The same after this cycle's admissions and preemption reservations."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """Everything one cycle decided. Same snapshot and config → equal Decision."""

    admissions: tuple[Admission, ...] = ()
    """In the order they were decided."""
    preemptions: tuple[Preemption, ...] = ()
    pending: tuple[PendingReason, ...] = ()
    """One per considered job not admitted, in line order (``position`` ascending)."""
    holds: tuple[CapacityHold, ...] = ()
    not_considered: tuple[NotConsidered, ...] = ()
    shares: tuple[TeamShare, ...] = ()
    """One per team, sorted by team id."""
    considered: int = 0
    """Jobs considered this cycle (at most lookback per team)."""
