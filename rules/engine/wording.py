"""The wording of pending reasons: which candidate failure explains a waiting job, its code,
and the sentence with the numbers, as :class:`~rules.engine.core.Placement` assembles them
at the end of a cycle (all text itself lives in :mod:`rules.engine.reasons`).

Functions of the placement's state, not methods, so that the placement reads as the steps of a
cycle; the numbers they quote are the end-of-cycle ones (see ``core``'s docstring for why those
explain a failure seen earlier in the cycle), but for an admission's explanation, worded as it
is made.

They only read the state. What they write is their own memos (``Memos.free``, ``frames``,
``fallback_notes``, ``not_tried_notes`` and ``Failure.notes``), which spare wording an equal
sentence twice and change no decision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rules.engine import reasons
from rules.engine.candidates import Candidates
from rules.engine.decision import CandidateNote, ClusterNote, Explanation, PendingReason
from rules.engine.quota import COHORT_SHORT
from rules.engine.reasons import ReasonCode, SkipCode
from rules.engine.snapshot import ClusterState, GpuModel, PendingJob
from rules.engine.state import EngineState, Failure, Waiting

if TYPE_CHECKING:
    from rules.engine.capacity import Pool


# The candidate failure "closest to running" explains the job: lower rank wins.
_RANK = {
    SkipCode.HELD_FOR_OTHER_JOB: 0,
    SkipCode.NO_NODE_FITS: 1,
    SkipCode.COHORT_CANNOT_LEND: 2,
    SkipCode.QUOTA_FULL: 3,
    SkipCode.NO_ENABLED_CLUSTER: 4,
    SkipCode.TOO_LARGE: 5,
}
_RANK_QUOTA = _RANK[SkipCode.QUOTA_FULL]  # candidates blocked by quota or capacity are counted
# The reason a primary candidate failure gives, where it depends on nothing else.
_REASON_OF = {
    SkipCode.HELD_FOR_OTHER_JOB: ReasonCode.CAPACITY_HELD,
    SkipCode.COHORT_CANNOT_LEND: ReasonCode.COHORT_HAS_NOTHING_TO_LEND,
    SkipCode.QUOTA_FULL: ReasonCode.QUOTA_EXHAUSTED,
}


def quota_code(pl: EngineState, team: str, model: str, need: int) -> SkipCode:
    outcome = pl.quota.fits(team, model, need)
    if outcome != COHORT_SHORT:
        return SkipCode.QUOTA_FULL
    if pl.quota.held(team, model) and pl.quota.fits_ignoring_holds(team, model, need):
        return SkipCode.HELD_FOR_OTHER_JOB
    return SkipCode.COHORT_CANNOT_LEND


def skip_code_of(pl: EngineState, f: Failure, job: PendingJob) -> SkipCode:
    if f.code is SkipCode.QUOTA_FULL:
        return quota_code(pl, job.team, f.model.key, job.gpus)
    return f.code


def detail_of(pl: EngineState, code: SkipCode, f: Failure, job: PendingJob) -> str:
    """The sentence for one candidate failure, with end-of-cycle numbers (see the module
    docstring for why those explain a failure seen earlier in the cycle)."""
    m = f.model.key
    g, r, need = job.gpus_per_replica, job.replicas, job.gpus
    unit = " GiB" if job.requirement.shared else ""  # a shared pool's quota counts GiB
    if code is SkipCode.QUOTA_FULL:
        row = pl.quota.row(job.team, m)
        return reasons.detail_quota_full(need, row.used, row.nominal, row.borrowing_limit, unit)
    if code is SkipCode.COHORT_CANNOT_LEND:
        row = pl.quota.row(job.team, m)
        return reasons.detail_cohort_cannot_lend(
            row.used,
            row.nominal,
            max(0, row.used + need - row.nominal),
            row.borrowing_limit,
            pl.quota.can_lend(job.team, m),
            unit,
        )
    if code is SkipCode.NO_ENABLED_CLUSTER:
        unavailable = pl.unavailable.get(m, ())
        return reasons.detail_no_enabled_cluster(
            [p.cluster for p in unavailable if p.state is ClusterState.DRAINING],
            [p.cluster for p in unavailable if p.state is ClusterState.DISABLED],
            [p.cluster for p in unavailable if p.state is ClusterState.UNREACHABLE],
        )
    booked = [p for p in pl.enabled.get(m, ()) if p.dev is not None]
    if booked and code in (SkipCode.TOO_LARGE, SkipCode.NO_NODE_FITS):
        return _device_detail(pl, code, booked, job)
    if code is SkipCode.TOO_LARGE:
        pools = pl.enabled[m]
        split = len({p.cluster for p in pools}) < len(pools)
        return reasons.detail_too_large(
            r, g, max(p.max_total for p in pools), max(p.empty_slots(g) for p in pools), split
        )
    if code is SkipCode.HELD_FOR_OTHER_JOB:
        if f.code is SkipCode.QUOTA_FULL:  # the cohort's lending is held
            cohort = pl.quota.row(job.team, m).cohort
            holder = pl.memos.quota_held_by.get((cohort, m), "")
            return reasons.detail_held_for_other(
                holder,
                _team_of_holder(pl, holder),
                job.team,
                pl.quota.held(job.team, m),
                "GiB" if unit else "GPUs",
            )
        held = sum(p.held_total() for p in pl.enabled[m])
        return reasons.detail_held_for_other(
            f.holder, _team_of_holder(pl, f.holder), job.team, held, "GiB" if unit else "GPUs"
        )
    largest, where, free, out_of_service = model_free(pl, m)
    if code is SkipCode.NO_NODE_FITS:
        pools = pl.enabled.get(m, [])
        # GPUs enough, on nodes whose CPU or memory is taken: say that, not "no room".
        if any(p.cpu is not None or p.mem is not None for p in pools) and any(
            p.fits(g, r) for p in pools
        ):
            return reasons.detail_no_node_fits_cpu(r, g, free)
    return reasons.detail_no_node_fits(r, g, largest, free, out_of_service, where)


def _device_detail(pl: EngineState, code: SkipCode, pools: list[Pool], job: PendingJob) -> str:
    """Why a share finds no room on pools booked per device: a share lives on one device,
    so the most free on one device is what a user needs to know, not the node's sum."""
    d = max(1, job.share_devices)
    per = -(-job.gpus_per_replica // d)
    if code is SkipCode.TOO_LARGE:
        return reasons.detail_share_too_large(per, d, max(p.device_size for p in pools))
    blocks = sorted(((p.max_device_free(), p.cluster) for p in pools), key=lambda b: (-b[0], b[1]))
    largest, where = blocks[0] if blocks else (0, "")
    # Room on a device, yet no node takes it: the devices' compute, or the node's CPU or
    # memory, is what is taken.
    stranded = largest >= per and job.replicas == 1
    compute = stranded and job.cores_percent > 0 and any(p.cores is not None for p in pools)
    return reasons.detail_no_device_fits(
        job.replicas,
        per,
        d,
        largest,
        where if largest else "",
        sum(p.free_total for p in pools),
        stranded=stranded and any(p.cpu is not None or p.mem is not None for p in pools),
        cores=job.cores_percent if compute else 0,
    )


def _team_of_holder(pl: EngineState, holder: str) -> str:
    """The team of the job a hold is for (a cycle holds at most once per model)."""
    return next((h.team for h in pl.holds if h.job_id == holder), "")


def model_free(pl: EngineState, model: str) -> tuple[int, str, int, int]:
    """(largest free block, the cluster holding it, free GPUs, GPUs on nodes out of service)
    in enabled clusters. The cluster is named so that a user knows where the closest fit is
    (the first by name when several hold as much; '' when nothing is free)."""
    cached = pl.memos.free.get(model) if pl.final else None
    if cached is None:
        pools = sorted(pl.enabled.get(model, ()), key=lambda p: p.cluster)
        blocks = [(p.max_block(), p.cluster) for p in pools]
        largest = max((b for b, _ in blocks), default=0)
        where = next((c for b, c in blocks if b == largest), "") if largest else ""
        cached = (
            largest,
            where,
            sum(p.free_total for p in pools),
            sum(p.out_of_service for p in pools),
        )
        if pl.final:  # nothing changes any more: compute once per model
            pl.memos.free[model] = cached
    return cached


def candidate_note(pl: EngineState, f: Failure, job: PendingJob) -> CandidateNote:
    """The note for one failure, with the numbers as they are now."""
    code = skip_code_of(pl, f, job)
    return CandidateNote(
        model=f.model.key,
        code=code,
        message=reasons.note(f.model.label, detail_of(pl, code, f, job)),
    )


def final_note(pl: EngineState, f: Failure, job: PendingJob) -> tuple[CandidateNote, int]:
    """The note for one failure once the cycle is final, and its rank; shared between jobs.

    A quota failure object belongs to one (team, model), a capacity failure to one
    (model, gang shape), so (failure, GPUs needed) identifies the words."""
    note = candidate_note(pl, f, job)
    f.notes[job.gpus] = entry = (note, _RANK[note.code])
    return entry


def pending_reason_of(pl: EngineState, w: Waiting, position: int) -> PendingReason:
    """A wait decided and worded when the job was visited."""
    job = w.job
    if w.code is ReasonCode.TEAM_HELD:
        message = reasons.msg_team_held(job.team)
    elif w.code is ReasonCode.INVALID_JOB:
        message = reasons.msg_invalid(w.detail)
    elif w.code is ReasonCode.NO_MODEL_MATCHES:
        message = reasons.msg_no_model_matches(len(pl.snap.models), [n.message for n in w.rejected])
    else:  # PREEMPTING, HOLDING_CAPACITY
        message = reasons.pending(
            job.replicas, job.gpus_per_replica, w.label, w.detail, shared=job.requirement.shared
        )
    return PendingReason(
        job_id=job.id,
        team=job.team,
        code=w.code,
        message=message,
        position=position,
        candidates=w.rejected,
    )


def reason_words(
    pl: EngineState, job: PendingJob, failures: tuple[Failure, ...], cands: Candidates, n_tried: int
) -> tuple[ReasonCode, str, tuple[CandidateNote, ...], str, str]:
    """Code, message, candidate notes and the message's frame of a capacity/quota wait.

    Jobs of one group share one failures tuple (the group memo), hence the same words:
    they are assembled once per tuple. WAITING_BEHIND differs per job only in its counts:
    its message is left empty and the frame (what goes before and after the detail) is
    returned instead."""
    need = job.gpus_per_replica * job.replicas
    if len(failures) == 1:
        f = failures[0]
        primary, best = f.notes.get(need) or final_note(pl, f, job)
        notes = [primary]
        primary_at = others = 0
    else:
        entries = [f.notes.get(need) or final_note(pl, f, job) for f in failures]
        ranks = [rank for _, rank in entries]
        notes = [note for note, _ in entries]
        best = min(ranks)
        primary_at = ranks.index(best)
        if notes[primary_at].code is SkipCode.NO_ENABLED_CLUSTER:
            # A model some cluster has, though that cluster takes nothing new now, explains
            # more than one no cluster has (and matches the code ``reason_code_of`` gives).
            primary_at = next(
                (
                    i
                    for i, rank in enumerate(ranks)
                    if rank == best and pl.unavailable.get(failures[i].model.key)
                ),
                primary_at,
            )
        primary = notes[primary_at]
        others = sum(1 for rank in ranks if rank <= _RANK_QUOTA) - (best <= _RANK_QUOTA)
        if primary_at:
            notes.insert(0, notes.pop(primary_at))
    f = failures[primary_at]
    code = _REASON_OF.get(primary.code) or reason_code_of(pl, primary.code, f, failures)
    label = f.model.label
    frame_key = (job.replicas, job.gpus_per_replica, label, others, job.requirement.shared)
    frame = pl.memos.frames.get(frame_key)
    if frame is None:
        frame = pl.memos.frames[frame_key] = reasons.pending_frame(*frame_key)
    head, tail = frame
    message = ""
    if code is not ReasonCode.WAITING_BEHIND:
        message = f"{head}{primary.message[len(label) + 2 :]}{tail}"
    if n_tried < len(cands.matched):
        notes.extend(fallback_note(pl, m) for m in cands.matched[n_tried:])
    rejected = cands.rejected
    return code, message, (*rejected, *notes) if rejected else tuple(notes), head, tail


def reason_code_of(
    pl: EngineState, primary: SkipCode, f: Failure, failures: tuple[Failure, ...]
) -> ReasonCode:
    if primary is SkipCode.HELD_FOR_OTHER_JOB:
        return ReasonCode.CAPACITY_HELD
    if primary is SkipCode.NO_NODE_FITS:
        return ReasonCode.WAITING_BEHIND if f.fit_at_start else ReasonCode.NO_CAPACITY
    if primary is SkipCode.COHORT_CANNOT_LEND:
        return ReasonCode.COHORT_HAS_NOTHING_TO_LEND
    if primary is SkipCode.QUOTA_FULL:
        return ReasonCode.QUOTA_EXHAUSTED
    if primary is SkipCode.NO_ENABLED_CLUSTER:
        states = {p.state for g in failures for p in pl.unavailable.get(g.model.key, ())}
        if ClusterState.UNREACHABLE in states:
            return ReasonCode.CLUSTER_UNREACHABLE
        if ClusterState.DRAINING in states:
            return ReasonCode.CLUSTER_DRAINING
        return ReasonCode.NO_ENABLED_CLUSTER
    return ReasonCode.JOB_TOO_LARGE


def not_tried_note(pl: EngineState, model: GpuModel) -> CandidateNote:
    note = pl.memos.not_tried_notes.get(model.key)
    if note is None:
        note = pl.memos.not_tried_notes[model.key] = CandidateNote(
            model=model.key,
            code=SkipCode.NOT_TRIED,
            message=reasons.note(model.label, reasons.detail_not_tried()),
        )
    return note


def fallback_note(pl: EngineState, model: GpuModel) -> CandidateNote:
    note = pl.memos.fallback_notes.get(model.key)
    if note is None:
        note = pl.memos.fallback_notes[model.key] = CandidateNote(
            model=model.key,
            code=SkipCode.FALLBACK_NOT_ALLOWED,
            message=reasons.note(model.label, reasons.detail_fallback_not_allowed()),
        )
    return note


def admission_explanation(
    pl: EngineState,
    job: PendingJob,
    model: GpuModel,
    cluster: str,
    leftover: int,
    borrowed: int,
    cands: Candidates,
    failures: list[Failure],
    cluster_notes: list[ClusterNote],
) -> Explanation:
    """Why ``job`` was admitted where it was: the message, the candidates skipped (rejected,
    failed, or not tried after this one) and the clusters that lost."""
    skipped = list(cands.rejected)
    skipped.extend(candidate_note(pl, f, job) for f in failures)
    chosen_at = cands.matched.index(model)
    for later in cands.matched[chosen_at + 1 :]:
        skipped.append(not_tried_note(pl, later) if job.fallback else fallback_note(pl, later))
    row = pl.quota.row(job.team, model.key)
    message = reasons.msg_admitted(
        job.replicas,
        job.gpus_per_replica,
        model.label,
        cluster,
        chosen_at == 0,
        job.policy.value,
        leftover,
        borrowed,
        row.used,
        row.nominal,
        named_first=job.requirement.models[:1] == (model.key,),
        shared=job.requirement.shared,
    )
    return Explanation(
        model=model.key,
        cluster=cluster,
        message=message,
        skipped=tuple(skipped),
        clusters=tuple(cluster_notes),
    )
