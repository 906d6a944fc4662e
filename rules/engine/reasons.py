"""Reason codes and the one place where their human messages are assembled.

Codes are stable API: the cycle stores them, the UI filters on them, users search for them.
Messages carry the numbers that block a job; their wording may change, their codes may not.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta


class ReasonCode(enum.StrEnum):
    """Why a job is still pending after a cycle (one per pending job)."""

    TEAM_HELD = "TEAM_HELD"
    """An admin holds the team's queue."""
    INVALID_JOB = "INVALID_JOB"
    """The job asks for no GPUs, or names a team the snapshot does not know."""
    NO_MODEL_MATCHES = "NO_MODEL_MATCHES"
    """The requirement matches no model in the catalog."""
    JOB_TOO_LARGE = "JOB_TOO_LARGE"
    """No enabled cluster could ever host the gang, even empty (node or node-count too small)."""
    NO_ENABLED_CLUSTER = "NO_ENABLED_CLUSTER"
    """No enabled cluster has nodes of any candidate model."""
    CLUSTER_DRAINING = "CLUSTER_DRAINING"
    """The only clusters with a candidate model are draining."""
    CLUSTER_UNREACHABLE = "CLUSTER_UNREACHABLE"
    """The only clusters with a candidate model take work but cannot be reached now."""
    QUOTA_EXHAUSTED = "QUOTA_EXHAUSTED"
    """The team's nominal plus borrowing limit is used on every candidate model."""
    COHORT_HAS_NOTHING_TO_LEND = "COHORT_HAS_NOTHING_TO_LEND"
    """The team may borrow more, but its cohort has no idle quota to lend."""
    NO_CAPACITY = "NO_CAPACITY"
    """Quota allows it, but no enabled cluster has room for the gang now."""
    WAITING_BEHIND = "WAITING_BEHIND"
    """It would have fit at the start of the cycle; jobs ahead in line took the room."""
    CAPACITY_HELD = "CAPACITY_HELD"
    """The room it would fit in is held for an older job (starvation guard)."""
    HOLDING_CAPACITY = "HOLDING_CAPACITY"
    """This job waited past the starvation guard; capacity is being held for it."""
    PREEMPTING = "PREEMPTING"
    """Jobs on borrowed quota are being preempted so that this job fits next cycle."""
    NOT_CONSIDERED = "NOT_CONSIDERED"
    """Beyond the per-team lookback; not considered this cycle."""
    MIN_RUNTIME = "MIN_RUNTIME"
    """Borrowed jobs would make room, but they are within their team's minimum runtime; it
    reclaims once that has passed."""
    PREEMPTION_BUDGET = "PREEMPTION_BUDGET"
    """Reclaiming its room would preempt more GPUs than this cycle's preemption budget has
    left; it tries again next cycle."""


class SkipCode(enum.StrEnum):
    """Why one candidate model was not (or could not be) chosen for a job."""

    NOT_IN_CATALOG = "NOT_IN_CATALOG"
    REQUIREMENT_NOT_MET = "REQUIREMENT_NOT_MET"
    SLICE_NOT_NAMED = "SLICE_NOT_NAMED"
    """A MIG slice, and the requirement names no models: slices are tried only when named."""
    KIND_MISMATCH = "KIND_MISMATCH"
    """A shared pool for a job asking for whole GPUs (or MIG slices), or the other way round:
    capacity kinds are never mixed."""
    FALLBACK_NOT_ALLOWED = "FALLBACK_NOT_ALLOWED"
    QUOTA_FULL = "QUOTA_FULL"
    COHORT_CANNOT_LEND = "COHORT_CANNOT_LEND"
    NO_ENABLED_CLUSTER = "NO_ENABLED_CLUSTER"
    TOO_LARGE = "TOO_LARGE"
    NO_NODE_FITS = "NO_NODE_FITS"
    HELD_FOR_OTHER_JOB = "HELD_FOR_OTHER_JOB"
    NOT_TRIED = "NOT_TRIED"
    """An earlier candidate fitted, so this one was not needed."""


class ClusterNoteCode(enum.StrEnum):
    """Why a cluster was not chosen for the chosen model."""

    DRAINING = "DRAINING"
    DISABLED = "DISABLED"
    UNREACHABLE = "UNREACHABLE"
    NO_ROOM = "NO_ROOM"
    WORSE_FIT = "WORSE_FIT"


class PreemptionCode(enum.StrEnum):
    """Why a running job is preempted."""

    RECLAIM_NOMINAL = "RECLAIM_NOMINAL"
    """A team within its nominal quota reclaims GPUs this job had borrowed."""


TIMES = " \u00d7 "
"""The multiplication sign of messages ("8 \u00d7 A100-80GB"), spaced; escaped for ruff."""


# --- formatting helpers -------------------------------------------------------------------------


def fmt_num(x: float) -> str:
    """12 → "12", 12.5 → "12.5" (no trailing ".0")."""
    return f"{x:g}"


def fmt_limit(limit: int | None) -> str:
    return "none" if limit is None else str(limit)


def count(n: int, noun: str) -> str:
    """1 job, 2 jobs."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fmt_wait(wait: timedelta) -> str:
    minutes = int(wait.total_seconds() // 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m"


def fmt_gang(replicas: int, gpus_per_replica: int, label: str, shared: bool = False) -> str:
    """1 x 8 → "8 x A100"; 2 x 4 → "2 replicas x 4 A100"; a share names its unit: "30 GiB of
    a100-80gb-shared", "2 replicas x 30 GiB of a100-80gb-shared"."""
    if shared:
        one = f"{gpus_per_replica} GiB of {label}"
        return one if replicas == 1 else f"{replicas} replicas{TIMES}{one}"
    if replicas == 1:
        return f"{gpus_per_replica}{TIMES}{label}"
    return f"{replicas} replicas{TIMES}{gpus_per_replica} {label}"


# --- details: one sentence per skip code, shared by candidate notes and pending messages -------


def detail_not_in_catalog() -> str:
    return "not in the catalog"


def detail_requirement_not_met(failures: list[str]) -> str:
    return f"does not meet the requirement ({'; '.join(failures)})"


def detail_slice_not_named(whole: str) -> str:
    return f"a MIG slice of {whole}, used only when the model list names it"


def detail_kind_mismatch(kind: str, shared_asked: bool) -> str:
    if shared_asked:
        return f"a {'MIG slice' if kind == 'mig' else 'whole GPU'}, and the job asks for a share"
    return "a shared GPU pool, and the job asks for whole GPUs"


def detail_fallback_not_allowed() -> str:
    return "not tried, the job does not allow fallback"


def detail_not_tried() -> str:
    return "not tried, an earlier candidate fitted"


def detail_quota_full(
    need: int, used: int, nominal: int, borrowing_limit: int | None, unit: str = ""
) -> str:
    """The shortfall, not the job's size: "2 more than the team may use" is what to ask the
    team admin for, or to wait for; the job's own size is already in the sentence's head.
    ``unit``: " GiB" for a shared pool, whose quota counts GiB."""
    may_use = nominal + (borrowing_limit or 0)
    short = used + need - may_use if borrowing_limit is not None else need
    return (
        f"team quota full: {max(1, short)}{unit} more than the team may use (it uses {used} of "
        f"{nominal}{unit} nominal, borrowing limit {fmt_limit(borrowing_limit)})"
    )


def detail_cohort_cannot_lend(
    used: int,
    nominal: int,
    borrow_need: int,
    borrowing_limit: int | None,
    can_lend: int,
    unit: str = "",
) -> str:
    """``borrow_need``: how far above nominal the team would be with the job; what the job
    itself would borrow leaves out what the team borrows already (the cohort's ``can_lend``
    has that counted), so the shortfall is in the job's own terms."""
    extra = borrow_need - max(0, used - nominal)
    can = max(0, can_lend)
    team = (
        f"the team uses {used} of {nominal}{unit} nominal, borrowing limit "
        f"{fmt_limit(borrowing_limit)}"
    )
    if can == 0:
        return f"cohort has nothing to lend: this job would borrow {extra}{unit} ({team})"
    return (
        f"cohort has too little to lend: it can lend {can} of the {extra}{unit} this job would "
        f"borrow, {max(1, extra - can)}{unit} short ({team})"
    )


def detail_no_enabled_cluster(
    draining: list[str], disabled: list[str], unreachable: list[str] | None = None
) -> str:
    if unreachable:
        return (
            f"its clusters cannot be reached ({', '.join(unreachable)}) and take nothing new "
            "until they answer"
        )
    if draining:
        return f"its clusters are draining ({', '.join(draining)}) and take nothing new"
    if disabled:
        return f"its clusters are disabled ({', '.join(disabled)})"
    return "no cluster has nodes of this model"


def detail_too_large(
    replicas: int, gpr: int, largest_node: int, slots: int, split: bool = False
) -> str:
    """``split``: some cluster offers the model under two resource names (MIG single and
    mixed strategy), which one gang cannot mix: say so, or "an empty cluster" would puzzle."""
    if gpr > largest_node:
        return f"needs {gpr} GPUs per replica; the largest node has {largest_node}"
    if split:
        return (
            f"needs {replicas} replicas of {gpr}; even empty, the nodes that offer it under one "
            f"resource name hold only {slots} (a gang cannot mix resource names)"
        )
    return f"needs {replicas} replicas of {gpr}; even an empty cluster holds only {slots}"


def detail_no_node_fits(
    replicas: int,
    gpr: int,
    largest_block: int,
    free: int,
    out_of_service: int = 0,
    largest_in: str = "",
) -> str:
    where = (
        f"no node with {gpr} free"
        if replicas == 1
        else f"no cluster with {replicas} slots of {gpr} free"
    )
    # A user who sees "0 free" on a pool they know is large should learn it is out of
    # service (cordoned or NotReady nodes), not busy: an admin can act on the first.
    down = f"; {out_of_service} more on cordoned or NotReady nodes" if out_of_service else ""
    block = f"largest free block {largest_block}" + (f" in {largest_in}" if largest_in else "")
    return f"{where} ({block}, {free} free in enabled clusters{down})"


def detail_no_node_fits_cpu(replicas: int, gpr: int, free: int) -> str:
    """The GPUs are free, but the nodes that have them lack the CPU or memory the job asks
    (a node whose CPUs are taken strands its GPUs)."""
    what = f"{gpr} free" if replicas == 1 else f"{replicas} slots of {gpr} free"
    return f"the nodes with {what} lack the CPU or memory it asks ({free} free in enabled clusters)"


def detail_share_too_large(per_device: int, devices: int, device_size: int) -> str:
    """A share larger than any device of the pool: it can never run there."""
    each = f" on each of {devices} devices" if devices > 1 else " on one device"
    return (
        f"needs {per_device} GiB{each}; a share lives on one device and the largest device "
        f"holds {device_size} GiB"
    )


def detail_no_device_fits(
    replicas: int,
    per_device: int,
    devices: int,
    largest: int,
    largest_in: str,
    free: int,
    stranded: bool = False,
    cores: int = 0,
) -> str:
    """No device has room for a share now (the pool's sum may well be larger); ``cores``:
    the compute it caps, when devices with the memory lack the compute."""
    where = f" in {largest_in}" if largest_in else ""
    if cores:
        return (
            f"no single device has {per_device} GiB and {cores} % of its compute free (devices "
            f"with the memory have too little compute left; {free} GiB free in enabled "
            f"clusters)"
        )
    if stranded:
        return (
            f"the devices with {per_device} GiB free are on nodes without the CPU or memory "
            f"it asks ({free} GiB free in enabled clusters)"
        )
    many = f" for {replicas} replicas" if replicas > 1 else ""
    each = f" on {devices} devices of one node" if devices > 1 else ""
    return (
        f"no single device has {per_device} GiB free{each}{many} (the most free on one "
        f"device is {largest} GiB{where}; {free} GiB free in enabled clusters, split "
        f"across devices)"
    )


def detail_waiting_behind(ahead: int, admitted_ahead: int) -> str:
    return (
        f"waiting behind {count(ahead, 'job')} ahead in line (higher priority or lower team "
        f"share); "
        f"{admitted_ahead} admitted this cycle took the room it would have fitted"
    )


def detail_held_for_other(
    holder: str, holder_team: str, team: str, held: int, units: str = "GPUs"
) -> str:
    """A holder of the waiting job's own team is named; one of another team only by its team
    (one team never sees another team's jobs). ``units``: "GiB" on a shared pool."""
    if holder_team == team:
        who = f"older job {holder}"
    else:
        who = f"an older job of team {holder_team}" if holder_team else "an older job"
    return f"the room is held for {who} (starvation guard, {held} {units} held)"


def detail_holding(
    held: int,
    need: int,
    nodes: int,
    cluster: str,
    cohort_gpus: int,
    waited: timedelta,
    guard: timedelta,
    units: str = "GPUs",
) -> str:
    parts = []
    if nodes:
        parts.append(f"{held} of {need} {units} on {count(nodes, 'node')} in {cluster}")
    if cohort_gpus:
        parts.append(f"{cohort_gpus} {units} of cohort quota")
    what = " and ".join(parts) if parts else "nothing yet (none is free)"
    return (
        f"waited {fmt_wait(waited)} (guard {fmt_wait(guard)}): holding {what} until running "
        f"jobs finish; later jobs may not use them"
    )


def detail_preempting(
    victims: int, inflight: int, cluster: str, used: int, nominal: int, unit: str = ""
) -> str:
    parts = []
    if victims:
        parts.append(f"preempting {count(victims, 'job')} on borrowed quota")
    if inflight:
        parts.append(f"waiting for {count(inflight, 'job')} already being preempted")
    return (
        f"{' and '.join(parts)} in {cluster} to reclaim nominal quota (team uses {used} of "
        f"{nominal}{unit} nominal, this job included); admitted once they stop"
    )


def detail_min_runtime(until: datetime, wait: timedelta) -> str:
    return (
        f"jobs on borrowed quota that would make room are within their team's minimum runtime "
        f"until {until.strftime('%H:%M')} UTC (in {fmt_wait(wait)}); reclaimed then"
    )


def detail_preemption_budget(victims: int, gpus: int, budget: int, spent: int) -> str:
    return (
        f"reclaiming its room would preempt {count(victims, 'job')} on borrowed quota "
        f"({count(gpus, 'GPU')}), more than the preemption budget has left "
        f"({budget} GPUs per cycle, {spent} being preempted already); tried again next cycle"
    )


# --- whole messages -----------------------------------------------------------------------------


def note(label: str, detail: str) -> str:
    """A candidate note: "T4: no node with 4 free (...)"."""
    return f"{label}: {detail}"


def pending(
    replicas: int, gpr: int, label: str, detail: str, others: int = 0, shared: bool = False
) -> str:
    """A pending message: "needs 8 x A100-80GB; <detail>"; the other blocked candidates are
    counted here and explained one by one in ``PendingReason.candidates``."""
    head, tail = pending_frame(replicas, gpr, label, others, shared)
    return f"{head}{detail}{tail}"


def pending_frame(
    replicas: int, gpr: int, label: str, others: int = 0, shared: bool = False
) -> tuple[str, str]:
    """What :func:`pending` puts before and after the detail: worded once for many jobs whose
    details alone differ (``WAITING_BEHIND``)."""
    tail = f" (and {others} other candidate{'s' if others > 1 else ''} blocked)" if others else ""
    return f"needs {fmt_gang(replicas, gpr, label, shared)}; ", tail


def msg_team_held(team: str) -> str:
    return f"team {team}'s queue is held by an admin; running jobs continue"


def msg_invalid(why: str) -> str:
    return f"the job cannot be scheduled: {why}"


def msg_no_model_matches(n_catalog: int, rejected: list[str]) -> str:
    msg = f"the requirement matches none of the {n_catalog} models in the catalog"
    if rejected:
        msg += f" ({'; '.join(rejected)})"
    return msg


def msg_admitted(
    replicas: int,
    gpr: int,
    label: str,
    cluster: str,
    first_choice: bool,
    policy: str,
    leftover: int,
    borrowed: int,
    used: int,
    nominal: int,
    named_first: bool = False,
    shared: bool = False,
) -> str:
    """``first_choice``: the model heads the policy's order; ``named_first``: the user named
    it first. Under ``cheapest`` or ``fastest`` the two differ, and the model the user named
    first is their first choice even where cheaper candidates were tried before it."""
    if first_choice:
        why = f"first {policy} candidate"
    elif named_first:
        why = "your first choice"
    else:
        why = "first fitting fallback candidate"
    units = "GiB" if shared else "GPUs"
    quota = (
        f"on borrowed quota ({borrowed} {units} above nominal {nominal})"
        if borrowed
        else f"within nominal ({used} of {nominal}{' GiB' if shared else ''})"
    )
    return (
        f"admitted {fmt_gang(replicas, gpr, label, shared)} in {cluster} ({why}; best fit leaves "
        f"{leftover} free on the nodes used; {quota})"
    )


def msg_cluster_state(state: str) -> str:
    if state == "unreachable":
        return "cannot be reached, takes nothing new until it answers"
    return f"{state}, takes nothing new"


def msg_cluster_no_room(largest_block: int) -> str:
    return f"no room (largest free block {largest_block})"


def msg_cluster_worse_fit(
    leftover: int, cluster_left: int, chosen_leftover: int, chosen_cluster_left: int
) -> str:
    return (
        f"worse fit (would leave {leftover} free on the nodes used and {cluster_left} in the "
        f"cluster; chosen leaves {chosen_leftover} and {chosen_cluster_left})"
    )


def msg_preempted(
    victim_team: str,
    label: str,
    gpus: int,
    cluster: str,
    for_team: str,
    used: int,
    nominal: int,
    shared: bool = False,
) -> str:
    """The victim's timeline entry: who reclaimed what, and why. The job it is reclaimed for
    belongs to another team, so it is not named (``Preemption.for_job`` keeps it)."""
    held = f"{gpus} GiB of {label}" if shared else f"{gpus} {label} GPU{'s' if gpus != 1 else ''}"
    return (
        f"preempted: team {for_team} reclaims its nominal {label} quota ({used} of {nominal}"
        f"{' GiB' if shared else ''} with the job it reclaims for); this job's {held} "
        f"in {cluster} ran on quota team {victim_team} had borrowed; its pods get SIGTERM and "
        f"their grace period to checkpoint, then it is requeued with its submit time"
    )


def msg_not_considered(lookback: int, position_from: int, unloaded: int) -> str:
    tail = f"; {unloaded} more not loaded" if unloaded else ""
    return (
        f"not considered this cycle: only the first {lookback} queued jobs of a team are "
        f"considered per cycle; position at least {position_from}{tail}"
    )
