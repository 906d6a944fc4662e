"""The engine's input: a frozen picture of the pool at one instant.

The cycle's loaders (``scheduling/snapshot.py``) build one :class:`Snapshot` from the database in
a handful of queries; the cycle hands it to :func:`rules.engine.decide`. Nothing here is
mutated by the engine; the engine copies what it needs into its own in-cycle state.

Units are stated on every field: GPUs are whole devices (or whole MIG slices when a model is a
MIG profile), memory is GiB, compute is dense fp16 TFLOPS per GPU, usage is cost-weighted,
decayed GPU-hours, and every datetime is timezone-aware.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any


class ClusterState(enum.StrEnum):
    """Whether a cluster takes new work.

    ``DRAINING``, ``DISABLED`` and ``UNREACHABLE`` all get nothing new; their running jobs keep
    running and keep counting against quota. They differ only in what the pending reason says.
    ``UNREACHABLE`` is an enabled cluster the portal cannot reach right now (the cycle derives
    it from the cluster's unreachable mark): a job admitted there would only wait.
    """

    ENABLED = "enabled"
    DRAINING = "draining"
    DISABLED = "disabled"
    UNREACHABLE = "unreachable"


class Policy(enum.StrEnum):
    """How a job's candidate models are ordered (see :func:`resolve_candidates`)."""

    CHEAPEST = "cheapest"
    """Lowest cost factor first; ties: less memory, then lower TFLOPS, then key (the default)."""
    FASTEST = "fastest"
    """Highest dense fp16 TFLOPS first; ties: lower cost factor, then key."""
    ORDERED = "ordered"
    """The order of ``Requirement.models``; without a list, the order of ``Snapshot.models``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuModel:
    """One GPU model of the catalog (the unit of capacity, like a Kueue ResourceFlavor)."""

    key: str
    """Stable catalog key, e.g. ``"a100-80gb"``; every other record names models by this key."""
    name: str = ""
    """Display name used in messages, e.g. ``"A100-80GB"``; empty means use ``key``."""
    cost_factor: float = 1.0
    """Relative price of one GPU-hour on this model (> 0). Orders ``cheapest``; the caller also
    uses it to weight the usage ledger."""
    tflops_fp16: float = 0.0
    """Dense fp16 TFLOPS of one GPU. Orders ``fastest``; matched by ``min_tflops_fp16``."""
    memory_gib: float = 0.0
    """Memory of one GPU in GiB. Matched by ``min_memory_gib``."""
    bf16: bool = False
    """Whether the model computes in bfloat16."""
    fp8: bool = False
    """Whether the model computes in fp8."""
    slice_of: str = ""
    """For a MIG slice, the key of the whole GPU it is cut from; empty for a whole GPU. A
    requirement without a model list matches whole GPUs only (see ``resolve_candidates``)."""
    shared_of: str = ""
    """For a shared pool (fractional GPUs through Volcano vGPU or HAMi), the key of the card
    whose devices it shares; empty otherwise. Its capacity, quota and a job's
    ``gpus_per_replica`` on it are GiB of GPU memory, not devices, and ``cost_factor`` is per
    GiB-hour (the card's cost / its memory). Only a requirement with ``shared`` set matches it,
    and such a requirement matches nothing else (the no-mixing rule)."""

    @property
    def kind(self) -> str:
        """The capacity kind: ``whole``, ``mig`` or ``shared``; pools of different kinds never
        take each other's jobs."""
        if self.shared_of:
            return "shared"
        return "mig" if self.slice_of else "whole"

    @property
    def label(self) -> str:
        """The name shown to users."""
        return self.name or self.key


@dataclass(frozen=True, slots=True, kw_only=True)
class Team:
    """A team: the unit of quota and fair share."""

    id: str
    """Stable identifier (the team slug or primary key as a string)."""
    weight: float = 1.0
    """Fair-share weight (> 0). A team of weight 2 is entitled to twice the share of weight 1."""
    cohort: str = "default"
    """The cohort: the set of teams that lend each other idle nominal quota."""
    held: bool = False
    """An admin has held this team's queue: nothing new is admitted; running jobs continue."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Quota:
    """A team's quota on one GPU model, pool-wide (the engine picks the cluster).

    A team with no row for a model has nominal 0 and no borrowing limit: it may run there only on
    idle quota of its cohort. To forbid a model, give the team a row with nominal 0, borrowing 0.
    """

    team: str
    """``Team.id``."""
    model: str
    """``GpuModel.key``."""
    nominal: int
    """Guaranteed GPUs (>= 0). Jobs within nominal are never preempted for another team."""
    borrowing_limit: int | None = None
    """Extra GPUs above nominal the team may take from idle cohort quota; ``None`` = no limit
    other than what the cohort has idle."""
    lending_limit: int | None = None
    """At most this many of the team's unused nominal GPUs are lent to the cohort; ``None`` = all
    of them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortQuota:
    """Quota owned by a cohort rather than by any team: lendable to every member.

    Optional. Kueue's Cohort resource offers the same; it is how an admin makes capacity that is
    nobody's guarantee usable by fair share alone.
    """

    cohort: str
    """``Team.cohort``."""
    model: str
    """``GpuModel.key``."""
    nominal: int
    """GPUs (>= 0) the cohort's members may borrow, on top of their idle nominal quota."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """One node's GPUs of one model, as the cycle sees them at snapshot time."""

    name: str
    """Node name, unique within its cluster."""
    model: str
    """``GpuModel.key`` of the node's GPUs (nodes with mixed GPUs are one Node per model)."""
    total_gpus: int
    """Allocatable GPUs of this model on the node. Pool capacity (the fair-share denominator)
    is the sum of these."""
    free_gpus: int
    """GPUs free for new work: ``total_gpus`` minus every ``RunningAllocation`` placed here
    (admitted-but-unbound ones included, by their node plan) and minus foreign pods. The engine
    does not subtract running allocations again."""
    out_of_service_gpus: int = 0
    """GPUs that would be free were the node in service (it is cordoned or not Ready, so the
    caller gives it ``free_gpus`` 0): counted only to tell a waiting user that the room
    exists but is out of service."""
    group: str = ""
    """Nodes of one model in one cluster that a job may not mix: each group is a pool of its
    own and a gang is placed within one. The cycle gives the GPU resource the node advertises
    the model under, since a MIG profile offered as ``nvidia.com/gpu`` (single strategy) on
    some nodes and as ``nvidia.com/mig-1g.10gb`` (mixed) on others is requested by a different
    name on each: a gang spanning both could never run."""
    devices: tuple[int, ...] = ()
    """For a node of a shared pool: the units (GiB) free on each device, in device order. A
    share lives on one device, so a replica is placed only where one device holds all of it
    (two devices with 30 GiB free cannot take 40 GiB). Empty: the node's ``free_gpus`` count
    as one device (the node-wide books of before). ``free_gpus`` still caps the node."""
    device_ids: tuple[str, ...] = ()
    """The devices' identities (HAMi and the vGPU plugin register each GPU's UUID), in the
    order of ``devices``; an admission names the planned device by it, else by its index."""
    device_cores: tuple[int, ...] = ()
    """Compute (% of the device) free on each device, in the order of ``devices``; empty:
    compute is not booked (a share that caps no compute needs none)."""
    device_policy: str = ""
    """Who picks the device within the node. ``""``: the portal does, and the manifest pins
    it (HAMi's device-UUID annotation). ``"binpack"`` / ``"spread"``: the cluster's scheduler
    does (Volcano vGPU), by that policy (the fullest / the emptiest device that fits), and the
    engine books the device that policy will take."""
    cpu_free: int | None = None
    """Milli-CPU free on the node for new pods; ``None``: not known, not checked. A node whose
    CPUs are taken strands its GPUs: no replica is planned where its CPU does not fit."""
    memory_free: int | None = None
    """MiB of host memory free on the node for new pods; ``None``: not known, not checked."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """A registered cluster and its GPU nodes."""

    id: str
    """Stable cluster identifier (slug)."""
    state: ClusterState = ClusterState.ENABLED
    """Enabled clusters take new work; draining, disabled and unreachable ones take none."""
    nodes: tuple[Node, ...] = ()
    """Every GPU node of the cluster."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningAllocation:
    """A job that holds GPUs: admitted, submitted, running or being preempted.

    Whether it runs on borrowed quota is not an input: the engine derives it every cycle (a job
    is on borrowed quota when, counting its team's allocations on that model oldest start first,
    any of its GPUs lies above the team's nominal), so a flag recorded at admission cannot go
    stale.
    """

    job_id: str
    """The job's identifier."""
    team: str
    """``Team.id``."""
    cluster: str
    """``Cluster.id`` it was admitted to."""
    model: str
    """``GpuModel.key`` it was admitted on."""
    replicas: int
    """Number of replicas (pods) of the gang."""
    gpus_per_replica: int
    """GPUs each replica holds on its node."""
    priority: int = 0
    """The job's priority; lower priority is preempted first."""
    started_at: datetime
    """When it was admitted (aware). Most recently started is preempted first."""
    nodes: tuple[str, ...] = ()
    """Node name per replica (actual binding when known, else the engine's plan). Preemption
    what-ifs need it to know where GPUs come free; an allocation without nodes is never chosen
    as a victim."""
    preempting: bool = False
    """A preemption is already under way; it still holds its GPUs until it stops."""
    protected_until: datetime | None = None
    """Never chosen as a victim before this instant: its team's minimum runtime, counted from
    when its pods started running (the caller works it out). ``None``: no protection (a job
    not running yet has lost no work to a preemption)."""
    cpu_milli: int = 0
    """Milli-CPU each replica asks: what its node gets back when it goes (the reclaim's
    what-if counts it where nodes report their CPU)."""
    memory_mib: int = 0
    """MiB of host memory each replica asks, likewise."""

    @property
    def gpus(self) -> int:
        """GPUs held in total."""
        return self.replicas * self.gpus_per_replica


def slot_setters(cls: type, names: tuple[str, ...]) -> tuple[Any, ...]:
    """The slot descriptors' setters of a frozen slotted dataclass, checked against its fields
    so that a field added later cannot be left unset by a fast constructor."""
    if tuple(f.name for f in fields(cls)) != names:  # pragma: no cover - caught by the tests
        raise TypeError(f"{cls.__name__} fields changed: update its fast constructor")
    return tuple(cls.__dict__[name].__set__ for name in names)


_RA = slot_setters(
    RunningAllocation,
    (
        "job_id",
        "team",
        "cluster",
        "model",
        "replicas",
        "gpus_per_replica",
        "priority",
        "started_at",
        "nodes",
        "preempting",
        "protected_until",
        "cpu_milli",
        "memory_mib",
    ),
)


def running_allocation(
    job_id: str,
    team: str,
    cluster: str,
    model: str,
    replicas: int,
    gpus_per_replica: int,
    priority: int,
    started_at: datetime,
    nodes: tuple[str, ...],
    preempting: bool,
    protected_until: datetime | None = None,
    cpu_milli: int = 0,
    memory_mib: int = 0,
) -> RunningAllocation:
    """``RunningAllocation(...)`` without the frozen dataclass's ``__init__``, for the
    thousands of running jobs the cycle loads every few hundred milliseconds (the generated
    ``__init__`` goes through ``object.__setattr__`` per field, slower than the slot setters).
    Equal to the keyword construction (tests/scheduling/engine/test_fast_paths.py)."""
    a: RunningAllocation = object.__new__(RunningAllocation)
    (
        s_id,
        s_team,
        s_cluster,
        s_model,
        s_replicas,
        s_gpus,
        s_prio,
        s_start,
        s_nodes,
        s_pre,
        s_prot,
        s_cpu,
        s_mem,
    ) = _RA
    s_id(a, job_id)
    s_team(a, team)
    s_cluster(a, cluster)
    s_model(a, model)
    s_replicas(a, replicas)
    s_gpus(a, gpus_per_replica)
    s_prio(a, priority)
    s_start(a, started_at)
    s_nodes(a, nodes)
    s_pre(a, preempting)
    s_prot(a, protected_until)
    s_cpu(a, cpu_milli)
    s_mem(a, memory_mib)
    return a


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """A team's decayed usage of one GPU model, from the usage ledger."""

    team: str
    """``Team.id``."""
    model: str
    """``GpuModel.key``."""
    weighted_gpu_hours: float
    """GPU-hours already multiplied by the model's cost factor and decayed with
    ``EngineConfig.usage_half_life`` (the engine neither weights nor decays it again)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Requirement:
    """What a job needs from a GPU; resolved against the catalog by :func:`resolve_candidates`.

    Constraints combine with AND. With an explicit ``models`` list only those models are
    candidates, and the constraints still apply to them.
    """

    models: tuple[str, ...] = ()
    """Explicit candidate ``GpuModel.key`` values; empty = every catalog model."""
    min_memory_gib: float = 0.0
    """Minimum memory per GPU in GiB (0 = any)."""
    min_tflops_fp16: float = 0.0
    """Minimum dense fp16 TFLOPS per GPU (0 = any)."""
    bf16: bool = False
    """Requires bfloat16 support."""
    fp8: bool = False
    """Requires fp8 support."""
    shared: bool = False
    """Asks for a fraction of a GPU (GiB of GPU memory per replica): only shared pools qualify.
    Without it, shared pools never do, whatever the model list names."""


ANY_GPU = Requirement()
"""The requirement that every catalog model meets."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingJob:
    """A queued job asking for a gang of ``replicas`` x ``gpus_per_replica`` on one model."""

    id: str
    """The job's identifier."""
    team: str
    """``Team.id``."""
    submitted_at: datetime
    """Submit time (aware); kept across preemption. FIFO within a team, and the starvation
    guard's clock."""
    gpus_per_replica: int
    """GPUs each replica needs on one node (>= 1)."""
    replicas: int = 1
    """Replicas of the gang (>= 1); all start at once on one model in one cluster, or none."""
    priority: int = 0
    """Higher goes first, before fair share."""
    requirement: Requirement = ANY_GPU
    """Which models qualify."""
    policy: Policy = Policy.CHEAPEST
    """How the qualifying models are ordered."""
    fallback: bool = True
    """Whether later candidates may be tried when the first has no room."""
    cpu_milli: int = 0
    """Milli-CPU each replica asks (checked against ``Node.cpu_free`` where nodes report it;
    a pod always takes some CPU, so a node with none free takes no replica)."""
    memory_mib: int = 0
    """MiB of host memory each replica asks (checked against ``Node.memory_free``)."""
    share_devices: int = 1
    """For a share: the devices each replica's ``gpus_per_replica`` units are split over,
    equally (HAMi's ``nvidia.com/gpu: N`` with ``gpumem`` each); 1 for one device."""
    cores_percent: int = 0
    """For a share: compute (% of a device) it reserves on each of its devices (0: none)."""

    @property
    def gpus(self) -> int:
        """GPUs needed in total."""
        return self.replicas * self.gpus_per_replica


@dataclass(frozen=True, slots=True, kw_only=True)
class Backlog:
    """Queued jobs of a team that the cycle did not load (beyond the lookback).

    The cycle should load only the first ``EngineConfig.lookback_per_team`` queued jobs of each
    team (ordered by priority desc, submit time, id) and count the rest here, so that a million
    queued jobs cost one count per team, not a million rows.
    """

    team: str
    """``Team.id``."""
    count: int
    """Number of queued jobs of the team not in ``Snapshot.pending``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Tunables of the decision, the same for every team."""

    lookback_per_team: int = 1000
    """At most this many queued jobs per team are considered per cycle (like Armada's queue
    lookback); later ones are reported as not considered."""
    starvation_wait: timedelta = timedelta(hours=2)
    """A job at the head of its team's line (in its priority band) that has waited this long
    and does not fit when its turn comes (fair-share order) gets what it lacks held: free GPUs
    on the nodes it would use and the cohort's lendable quota. Jobs visited after it may not
    use them; jobs before it (higher priority, lower share) may."""
    max_capacity_holds: int = 4
    """At most this many holds per cycle, and at most one per GPU model (the first starving
    head visited: the lowest-share team's), so that holds do not fragment a model."""
    usage_half_life: timedelta = timedelta(days=7)
    """Half-life the caller decayed ``Usage`` with; normalises usage into a share."""
    usage_weight: float = 1.0
    """How much decayed usage counts against current allocation in the share (0 = none)."""
    preemption: bool = True
    """Whether a team within nominal may reclaim from borrowers."""
    preemption_budget_gpus: int | None = None
    """At most this many GPUs are preempted per cycle, GPUs of jobs still being preempted from
    earlier cycles included (so cycles run in quick succession do not multiply it). A reclaim
    larger than the whole budget goes alone: only when nothing else is being preempted.
    ``None``: no budget."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Demand:
    """One shape of the work the pool expects, and how often it comes: the reference the
    placement rule measures fragmentation against (see ``rules.engine.placement``)."""

    gpus_per_replica: int
    """Units one replica asks (GPUs, slices, or a shared pool's units); 0: a CPU-only pod,
    which can use no GPU at all."""
    share_devices: int = 1
    """For a share: the devices those units are split over."""
    cpu_milli: int = 0
    """Milli-CPU one replica asks."""
    memory_mib: int = 0
    """MiB of host memory one replica asks."""
    models: tuple[str, ...] = ()
    """``GpuModel.key`` values it may run on; empty: any."""
    weight: float = 1.0
    """Relative frequency (> 0); normalised over the snapshot's demand."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Everything one decision depends on, at instant ``now``."""

    now: datetime
    """The cycle's clock (aware); the engine never reads the wall clock."""
    models: tuple[GpuModel, ...]
    """The catalog, in admin order (``ordered`` without a list uses this order)."""
    teams: tuple[Team, ...]
    """Every team that has pending or running jobs (others may be included)."""
    quotas: tuple[Quota, ...] = ()
    """Per (team, model) quota rows; missing rows mean nominal 0, no borrowing limit."""
    clusters: tuple[Cluster, ...] = ()
    """Every registered cluster with its nodes."""
    running: tuple[RunningAllocation, ...] = ()
    """Every job holding GPUs (admitted, submitted, running, preempting)."""
    usage: tuple[Usage, ...] = ()
    """Decayed usage per (team, model)."""
    pending: tuple[PendingJob, ...] = ()
    """Queued jobs, in any order (the engine sorts each team's queue)."""
    cohort_quotas: tuple[CohortQuota, ...] = ()
    """Quota owned by cohorts (optional)."""
    backlog: tuple[Backlog, ...] = field(default=())
    """Per team, queued jobs the cycle did not load."""
    demand: tuple[Demand, ...] = ()
    """The expected mix of work (optional). With it, pools that book devices or CPU place
    each replica where the free room left is least fragmented for this mix; without it,
    every pool places by best fit."""
