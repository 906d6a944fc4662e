"""The pure scheduling engine: frozen dataclasses in, decisions out. Standard library only.

``decide(snapshot, config) -> Decision`` orders pending jobs by priority, then their team's
weighted dominant share (recomputed after every admission), then submit time; chooses a model
(policy order, fallback) and a cluster (best fit) for each gang; reclaims nominal quota by
preemption; and explains every admission and every wait. See ``docs/scheduling.md``.
"""

from __future__ import annotations

from rules.engine.candidates import Candidates, requirement_failures, resolve_candidates
from rules.engine.core import DEFAULT_CONFIG, decide
from rules.engine.decision import (
    Admission,
    CandidateNote,
    CapacityHold,
    ClusterNote,
    Decision,
    Explanation,
    NotConsidered,
    PendingReason,
    Preemption,
    TeamShare,
)
from rules.engine.quota import quota_reach
from rules.engine.reasons import ClusterNoteCode, PreemptionCode, ReasonCode, SkipCode
from rules.engine.snapshot import (
    ANY_GPU,
    Backlog,
    Cluster,
    ClusterState,
    CohortQuota,
    Demand,
    EngineConfig,
    GpuModel,
    Node,
    PendingJob,
    Policy,
    Quota,
    Requirement,
    RunningAllocation,
    Snapshot,
    Team,
    Usage,
    running_allocation,
)

__all__ = [
    "ANY_GPU",
    "DEFAULT_CONFIG",
    "Admission",
    "Backlog",
    "CandidateNote",
    "Candidates",
    "CapacityHold",
    "Cluster",
    "ClusterNote",
    "ClusterNoteCode",
    "ClusterState",
    "CohortQuota",
    "Decision",
    "Demand",
    "EngineConfig",
    "Explanation",
    "GpuModel",
    "Node",
    "NotConsidered",
    "PendingJob",
    "PendingReason",
    "Policy",
    "Preemption",
    "PreemptionCode",
    "Quota",
    "ReasonCode",
    "Requirement",
    "RunningAllocation",
    "SkipCode",
    "Snapshot",
    "Team",
    "TeamShare",
    "Usage",
    "decide",
    "quota_reach",
    "requirement_failures",
    "resolve_candidates",
    "running_allocation",
]
