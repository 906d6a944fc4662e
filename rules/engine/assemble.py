"""Step 5 of a decision: the Decision assembled from its state once every job is visited
(messages, positions, the not-considered tail, the shares), and the notes on the clusters an
admission did not take. They only read the state (and fill the wording memos): all text
lives in ``reasons`` and ``wording``.
"""

from __future__ import annotations

import functools
from typing import TypeVar

from rules.engine import reasons
from rules.engine.capacity import Pool
from rules.engine.decision import (
    ClusterNote,
    Decision,
    NotConsidered,
    PendingReason,
    TeamShare,
    pending_reason,
)
from rules.engine.reasons import ClusterNoteCode, ReasonCode
from rules.engine.snapshot import (
    ClusterState,
    GpuModel,
)
from rules.engine.state import (
    EngineState,
    Waiting,
    Words,
)
from rules.engine.wording import (
    pending_reason_of,
    reason_words,
)

# What a cluster that takes nothing new is noted as, by its state.
_NOTE_OF_STATE = {
    ClusterState.DRAINING: ClusterNoteCode.DRAINING,
    ClusterState.DISABLED: ClusterNoteCode.DISABLED,
    ClusterState.UNREACHABLE: ClusterNoteCode.UNREACHABLE,
}


_K = TypeVar("_K")
_V = TypeVar("_V")


class _Forgetful(dict[_K, _V]):
    """A memo that remembers nothing (``Placement.reuse_words = False``)."""

    def __setitem__(self, key: _K, value: _V) -> None:
        pass


def notes_on_clusters(
    pl: EngineState, model: GpuModel, fitting: list[tuple[tuple[int, int, str], Pool, list[int]]]
) -> list[ClusterNote]:
    """Why the other clusters with this model lost (computed before charging)."""
    (leftover, cluster_left, _), pool, _ = fitting[0]
    notes: list[ClusterNote] = []
    memo = pl.memos.cluster_notes
    others = {id(p): rank for rank, p, _ in fitting[1:]}
    for other in pl.enabled.get(model.key, ()):
        if other is pool:
            continue
        rank = others.get(id(other))
        # Notes are equal for equal numbers: made once per cycle, then shared.
        if rank is None:
            key: tuple[object, ...] = (other.cluster, other.max_block())
        else:
            key = (other.cluster, rank[0], rank[1], leftover, cluster_left)
        note = memo.get(key)
        if note is None:
            if rank is None:
                code = ClusterNoteCode.NO_ROOM
                detail = reasons.msg_cluster_no_room(other.max_block())
            else:
                code = ClusterNoteCode.WORSE_FIT
                detail = reasons.msg_cluster_worse_fit(rank[0], rank[1], leftover, cluster_left)
            note = memo[key] = ClusterNote(
                cluster=other.cluster, code=code, message=reasons.note(other.cluster, detail)
            )
        notes.append(note)
    for other in pl.unavailable.get(model.key, ()):
        note = memo.get(other.cluster)
        if note is None:
            code = _NOTE_OF_STATE.get(other.state, ClusterNoteCode.DISABLED)
            note = memo[other.cluster] = ClusterNote(
                cluster=other.cluster,
                code=code,
                message=reasons.note(other.cluster, reasons.msg_cluster_state(other.state)),
            )
        notes.append(note)
    return notes


def assemble(pl: EngineState) -> Decision:
    """The Decision once every job is visited: every wait worded, with its position, the
    jobs not considered and each team's share."""
    # The loop below is the one place that runs once per pending job: kept flat.
    memo = pl.memos.reasons if pl.reuse_words else _Forgetful[int, Words]()
    words = functools.partial(reason_words, pl)
    worded = functools.partial(pending_reason_of, pl)
    waiting_behind = ReasonCode.WAITING_BEHIND
    detail_waiting = reasons.detail_waiting_behind
    new = pending_reason
    pending: list[PendingReason] = []
    append = pending.append
    position = 0
    for w in pl.waiting:
        position += 1
        if isinstance(w, Waiting):
            append(worded(w, position))
            continue
        job, failures, cands, n_tried, ahead, admitted_ahead = w
        cached = memo.get(id(failures))
        if cached is None:
            cached = memo[id(failures)] = words(job, failures, cands, n_tried)
        code, message, candidates, head, tail = cached
        if code is waiting_behind:  # the one message with per-job numbers
            message = f"{head}{detail_waiting(ahead, admitted_ahead)}{tail}"
        append(new(job.id, job.team, code, message, position, candidates))
    position_from = len(pending) + 1
    backlog: dict[str, int] = {}
    for b in pl.snap.backlog:
        backlog[b.team] = backlog.get(b.team, 0) + max(0, b.count)
    not_considered = [
        NotConsidered(
            team=team,
            job_ids=pl.beyond.get(team, ()),
            unloaded=backlog.get(team, 0),
            position_from=position_from,
            message=reasons.msg_not_considered(
                pl.config.lookback_per_team, position_from, backlog.get(team, 0)
            ),
        )
        for team in sorted(set(pl.beyond) | {t for t, n in backlog.items() if n})
    ]
    shares = []
    for team in sorted(pl.teams):
        alloc, dominant = pl.shares.allocation_share(team)
        shares.append(
            TeamShare(
                team=team,
                weight=pl.teams[team].weight,
                dominant_model=dominant,
                allocation_share=alloc,
                usage_share=pl.shares.usage_share(team),
                share_before=pl.share_before[team],
                share_after=pl.shares.share(team),
            )
        )
    return Decision(
        admissions=tuple(pl.admissions),
        preemptions=tuple(pl.preemptions),
        pending=tuple(pending),
        holds=tuple(pl.holds),
        not_considered=tuple(not_considered),
        shares=tuple(shares),
        considered=pl.visited,
    )
