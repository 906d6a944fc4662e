"""The engine's shortcuts give what the straightforward path gives.

- ``pending_reason`` (slot setters) builds the same ``PendingReason`` as its ``__init__``;
- the reason memo (jobs of one signature share the words of the first) changes nothing:
  ``Placement.reuse_words = False`` words every pending job afresh, over random snapshots with many
  equal jobs, holds and preemptions.
"""

from __future__ import annotations

import random
from dataclasses import fields, replace

from hypothesis import given
from hypothesis import strategies as st

from rules.engine import (
    CandidateNote,
    Decision,
    EngineConfig,
    PendingJob,
    PendingReason,
    ReasonCode,
    Requirement,
    SkipCode,
    Snapshot,
    decide,
)
from rules.engine.core import Placement
from rules.engine.decision import pending_reason
from tests.scheduling.engine.test_properties import PROPERTY, snapshots


class _Straightforward(Placement):
    reuse_words = False


def _decide_straightforward(snap: Snapshot, config: EngineConfig) -> Decision:
    return _Straightforward(snap, config).run()


def test_the_fast_pending_reason_equals_the_dataclass() -> None:
    notes = (CandidateNote(model="t4", code=SkipCode.NO_NODE_FITS, message="T4: no room"),)
    fast = pending_reason("j1", "alice", ReasonCode.NO_CAPACITY, "needs 1 × T4", 3, notes)
    slow = PendingReason(
        job_id="j1",
        team="alice",
        code=ReasonCode.NO_CAPACITY,
        message="needs 1 × T4",
        position=3,
        candidates=notes,
    )
    assert fast == slow
    assert repr(fast) == repr(slow)
    assert [f.name for f in fields(PendingReason)] == [
        "job_id",
        "team",
        "code",
        "message",
        "position",
        "candidates",
    ]


def test_the_fast_running_allocation_equals_the_dataclass() -> None:
    from datetime import UTC, datetime

    from rules.engine import RunningAllocation, running_allocation

    started = datetime(2026, 12, 3, 13, 0, tzinfo=UTC)
    fast = running_allocation("j1", "alice", "east", "t4", 2, 4, 5, started, ("n1", "n2"), True)
    slow = RunningAllocation(
        job_id="j1",
        team="alice",
        cluster="east",
        model="t4",
        replicas=2,
        gpus_per_replica=4,
        priority=5,
        started_at=started,
        nodes=("n1", "n2"),
        preempting=True,
    )
    assert fast == slow
    assert repr(fast) == repr(slow)
    assert hash(fast) == hash(slow)


def _with_equal_jobs(snap: Snapshot, rnd: random.Random) -> Snapshot:
    """Many copies of a few job shapes per team, so that the memos are exercised."""
    if not snap.pending:
        return snap
    shapes = rnd.sample(snap.pending, min(4, len(snap.pending)))
    extra = []
    for k in range(rnd.randint(20, 80)):
        base = rnd.choice(shapes)
        extra.append(
            replace(
                base,
                id=f"copy{k}",
                team=rnd.choice(snap.teams).id if snap.teams else base.team,
                submitted_at=base.submitted_at.replace(second=rnd.randint(0, 59)),
                # an equal requirement written as a new object
                requirement=Requirement(
                    models=base.requirement.models,
                    min_memory_gib=base.requirement.min_memory_gib,
                ),
                fallback=rnd.choice([True, base.fallback]),
            )
        )
    pending: list[PendingJob] = [*snap.pending, *extra]
    return replace(snap, pending=tuple(pending))


@PROPERTY
@given(snapshots(), st.randoms(use_true_random=False))
def test_shared_words_equal_words_made_per_job(
    case: tuple[Snapshot, EngineConfig], rnd: random.Random
) -> None:
    snap, config = case
    snap = _with_equal_jobs(snap, rnd)
    assert decide(snap, config) == _decide_straightforward(snap, config)
