"""What-if before saving: what the next cycle would do differently under proposed quota,
team-policy, cohort or cluster-state changes.

The preview loads the snapshot the cycle would load (``scheduling.snapshot.snapshot_load``, with
its minimum-runtime protections), decides it twice with the real engine, once as it is and once
with the proposal applied to a copy (``dataclasses.replace``; nothing is written), and
reports the difference: jobs that would start, jobs that would be preempted (by team), jobs
newly blocked and why, and guarantees against capacity per model. Saving the same changes and
running a cycle at the same instant does what the preview said
(``tests/scheduling/test_preview.py``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from django.utils import timezone

from portal.models import Job
from rules import engine
from scheduling.inventory import Cluster
from scheduling.models import DEFAULT_COHORT_SLUG
from scheduling.snapshot import engine_config, snapshot_load

KEEP: Any = object()
"""A proposed field left as it is now (an absent key in the API)."""

CLUSTER_STATES = ("enabled", "draining", "disabled")


@dataclass(frozen=True)
class QuotaProposal:
    """A team's quota on one model as proposed; ``KEEP`` leaves a field as it is."""

    team: str
    model: str
    nominal: Any = KEEP
    borrowing_limit: Any = KEEP
    lending_limit: Any = KEEP


@dataclass(frozen=True)
class TeamProposal:
    """A team's fair-share weight and cohort as proposed (cohort ``default``: the pool's)."""

    team: str
    weight: Any = KEEP
    cohort: Any = KEEP


@dataclass(frozen=True)
class CohortQuotaProposal:
    """GPUs of one model a cohort owns, as proposed."""

    cohort: str
    model: str
    nominal: int


@dataclass(frozen=True)
class ClusterProposal:
    """A cluster's state as proposed: enabled, draining or disabled."""

    cluster: str
    state: str


@dataclass(frozen=True)
class Proposal:
    """Changes an admin is about to save, all at once."""

    quotas: tuple[QuotaProposal, ...] = ()
    teams: tuple[TeamProposal, ...] = ()
    cohort_quotas: tuple[CohortQuotaProposal, ...] = ()
    clusters: tuple[ClusterProposal, ...] = ()

    def is_empty(self) -> bool:
        return not (self.quotas or self.teams or self.cohort_quotas or self.clusters)


# ---------------------------------------------------------------------------------------------
# Applying a proposal to a snapshot (pure)
# ---------------------------------------------------------------------------------------------
def _quotas(snap: engine.Snapshot, changes: tuple[QuotaProposal, ...]) -> tuple[engine.Quota, ...]:
    rows = {(q.team, q.model): q for q in snap.quotas}
    for c in changes:
        now = rows.get((c.team, c.model)) or engine.Quota(team=c.team, model=c.model, nominal=0)
        rows[(c.team, c.model)] = dataclasses.replace(
            now,
            nominal=now.nominal if c.nominal is KEEP else c.nominal,
            borrowing_limit=now.borrowing_limit if c.borrowing_limit is KEEP else c.borrowing_limit,
            lending_limit=now.lending_limit if c.lending_limit is KEEP else c.lending_limit,
        )
    return tuple(rows.values())


def _teams(snap: engine.Snapshot, changes: tuple[TeamProposal, ...]) -> tuple[engine.Team, ...]:
    by_id = {c.team: c for c in changes}
    teams = []
    for t in snap.teams:
        c = by_id.get(t.id)
        if c is not None:
            t = dataclasses.replace(
                t,
                weight=t.weight if c.weight is KEEP else float(c.weight),
                cohort=t.cohort if c.cohort is KEEP else (c.cohort or DEFAULT_COHORT_SLUG),
            )
        teams.append(t)
    return tuple(teams)


def _cohort_quotas(
    snap: engine.Snapshot, changes: tuple[CohortQuotaProposal, ...]
) -> tuple[engine.CohortQuota, ...]:
    rows = {(q.cohort, q.model): q for q in snap.cohort_quotas}
    for c in changes:
        rows[(c.cohort, c.model)] = engine.CohortQuota(
            cohort=c.cohort, model=c.model, nominal=c.nominal
        )
    return tuple(q for q in rows.values() if q.nominal > 0)


def _clusters(
    snap: engine.Snapshot, changes: tuple[ClusterProposal, ...], unreachable: frozenset[str]
) -> tuple[engine.Cluster, ...]:
    """Clusters with their proposed state; an enabled cluster the portal cannot reach stays
    unreachable, as the cycle would see it."""
    by_id = {c.cluster: c.state for c in changes}
    out = []
    for cluster in snap.clusters:
        state = by_id.get(cluster.id)
        if state is not None:
            new = engine.ClusterState(state)
            if new is engine.ClusterState.ENABLED and cluster.id in unreachable:
                new = engine.ClusterState.UNREACHABLE
            cluster = dataclasses.replace(cluster, state=new)
        out.append(cluster)
    return tuple(out)


def apply_proposal(
    snap: engine.Snapshot, proposal: Proposal, *, unreachable: frozenset[str] = frozenset()
) -> engine.Snapshot:
    """The snapshot as the next cycle would load it once ``proposal`` is saved."""
    return dataclasses.replace(
        snap,
        quotas=_quotas(snap, proposal.quotas),
        teams=_teams(snap, proposal.teams),
        cohort_quotas=_cohort_quotas(snap, proposal.cohort_quotas),
        clusters=_clusters(snap, proposal.clusters, unreachable),
    )


# ---------------------------------------------------------------------------------------------
# Comparing two decisions (pure)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StartRow:
    job: str
    team: str
    model: str
    cluster: str
    gpus: int
    new: bool
    """False when the cycle would start it under the current settings as well."""
    name: str = ""


@dataclass(frozen=True)
class PreemptRow:
    job: str
    team: str
    model: str
    cluster: str
    gpus: int
    for_team: str
    for_job: str
    message: str
    new: bool
    name: str = ""


@dataclass(frozen=True)
class BlockedRow:
    job: str
    team: str
    code: str
    message: str
    was: str
    """What the current settings would do: ``start``, or the reason code it waits with."""
    name: str = ""


@dataclass(frozen=True)
class TeamPreempted:
    team: str
    jobs: int
    gpus: int


@dataclass(frozen=True)
class Guarantee:
    """Per model: nominal quotas (teams) and cohort-owned quota against the GPUs of clusters
    that take work, now and as proposed."""

    model: str
    nominal: int
    nominal_now: int
    cohort_owned: int
    capacity: int
    capacity_now: int

    @property
    def over(self) -> int:
        return max(0, self.nominal - self.capacity)

    @property
    def over_now(self) -> int:
        return max(0, self.nominal_now - self.capacity_now)


@dataclass
class Preview:
    """What the next cycle would do with the proposal, against what it would do without."""

    now: dt.datetime
    would_start: list[StartRow] = field(default_factory=list)
    would_preempt: list[PreemptRow] = field(default_factory=list)
    preempted_by_team: list[TeamPreempted] = field(default_factory=list)
    newly_blocked: list[BlockedRow] = field(default_factory=list)
    guarantees: list[Guarantee] = field(default_factory=list)
    starts_now: int = 0
    preempts_now: int = 0

    @property
    def overcommitted(self) -> list[Guarantee]:
        return [g for g in self.guarantees if g.over]

    @property
    def changes_anything(self) -> bool:
        return bool(
            any(r.new for r in self.would_start)
            or any(r.new for r in self.would_preempt)
            or self.newly_blocked
            or len(self.would_start) != self.starts_now
            or len(self.would_preempt) != self.preempts_now
        )


def _in_service(snap: engine.Snapshot) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for c in snap.clusters:
        if c.state is engine.ClusterState.ENABLED:
            for n in c.nodes:
                out[n.model] += n.total_gpus
    return out


def _nominal(snap: engine.Snapshot) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for q in snap.quotas:
        out[q.model] += q.nominal
    return out


def guarantees(before: engine.Snapshot, after: engine.Snapshot) -> list[Guarantee]:
    """Per model with any quota or hardware: guaranteed GPUs against GPUs in service."""
    nominal_now, nominal = _nominal(before), _nominal(after)
    cap_now, cap = _in_service(before), _in_service(after)
    owned: dict[str, int] = defaultdict(int)
    for q in after.cohort_quotas:
        owned[q.model] += q.nominal
    keys = [m.key for m in after.models]
    return [
        Guarantee(
            model=k,
            nominal=nominal[k],
            nominal_now=nominal_now[k],
            cohort_owned=owned[k],
            capacity=cap[k],
            capacity_now=cap_now[k],
        )
        for k in keys
        if nominal[k] or nominal_now[k] or cap[k] or cap_now[k] or owned[k]
    ]


def compare(
    before: engine.Snapshot,
    after: engine.Snapshot,
    current: engine.Decision,
    proposed: engine.Decision,
) -> Preview:
    """The difference between the decision as things are and the one with the proposal."""
    gpus = {j.id: j.gpus for j in after.pending}
    gpus.update((a.job_id, a.gpus) for a in after.running)
    started_now = {a.job_id for a in current.admissions}
    preempted_now = {p.job_id for p in current.preemptions}
    preview = Preview(
        now=after.now, starts_now=len(current.admissions), preempts_now=len(current.preemptions)
    )
    preview.would_start = [
        StartRow(
            a.job_id, a.team, a.model, a.cluster, gpus.get(a.job_id, 0), a.job_id not in started_now
        )
        for a in proposed.admissions
    ]
    preview.would_preempt = [
        PreemptRow(
            p.job_id,
            p.team,
            p.model,
            p.cluster,
            gpus.get(p.job_id, 0),
            p.for_team,
            p.for_job,
            p.message,
            p.job_id not in preempted_now,
        )
        for p in proposed.preemptions
    ]
    per_team: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in preview.would_preempt:
        per_team[r.team][0] += 1
        per_team[r.team][1] += r.gpus
    preview.preempted_by_team = [TeamPreempted(t, n, g) for t, (n, g) in sorted(per_team.items())]
    was_code = {r.job_id: str(r.code) for r in current.pending}
    for r in proposed.pending:
        code = str(r.code)
        if r.job_id in started_now:
            was = "start"
        elif was_code.get(r.job_id, code) != code:
            was = was_code[r.job_id]
        else:
            continue
        preview.newly_blocked.append(BlockedRow(r.job_id, r.team, code, r.message, was))
    preview.guarantees = guarantees(before, after)
    return preview


# ---------------------------------------------------------------------------------------------
# The preview against the database
# ---------------------------------------------------------------------------------------------
def _unreachable() -> frozenset[str]:
    """Clusters the portal cannot reach now: enabling one in a preview keeps it unreachable."""
    return frozenset(
        Cluster.objects.filter(unreachable_since__isnull=False).values_list("name", flat=True)
    )


def cluster_names() -> list[str]:
    """Registered clusters, by name (what a proposal may name)."""
    return list(Cluster.objects.values_list("name", flat=True))


def preview_changes(proposal: Proposal, *, now: dt.datetime | None = None) -> Preview:
    """Run the engine on the current snapshot with and without ``proposal``; write nothing."""
    now = now or timezone.now()
    config = engine_config()
    before = snapshot_load(now=now, config=config).snapshot
    after = apply_proposal(before, proposal, unreachable=_unreachable())
    preview = compare(before, after, engine.decide(before, config), engine.decide(after, config))
    ids = {r.job for r in preview.would_start} | {r.job for r in preview.would_preempt}
    ids |= {r.job for r in preview.newly_blocked}
    names = {
        str(pk): name
        for pk, name in Job.objects.filter(public_id__in=ids).values_list("public_id", "name")
    }
    preview.would_start = [replace(r, name=names.get(r.job, "")) for r in preview.would_start]
    preview.would_preempt = [replace(r, name=names.get(r.job, "")) for r in preview.would_preempt]
    preview.newly_blocked = [replace(r, name=names.get(r.job, "")) for r in preview.newly_blocked]
    return preview
