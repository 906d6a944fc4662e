"""Invariants over random snapshots (hypothesis).

- never more GPUs admitted (or held) on a node than it had free;
- never above nominal + borrowing limit for a (team, model) that got admissions;
- gangs complete or absent: one node per replica, all in the chosen cluster and model;
- every pending job is admitted, has exactly one reason, or is marked not considered;
- deterministic, and independent of the order of the input tuples;
- preemption only of other teams' jobs on borrowed quota in enabled clusters, only for a job
  within its nominal, and only when releasing them makes that job fit.

``ENGINE_PROPERTY_EXAMPLES`` sets the number of examples (default 60: a few seconds).
"""

from __future__ import annotations

import os
import random
from collections import defaultdict
from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rules.engine import (
    Cluster,
    ClusterState,
    CohortQuota,
    Decision,
    EngineConfig,
    Node,
    PendingJob,
    Policy,
    Quota,
    Requirement,
    RunningAllocation,
    Snapshot,
    Team,
    decide,
)
from tests.scheduling.engine.builders import CATALOG, NOW

PROPERTY = settings(
    max_examples=int(os.environ.get("ENGINE_PROPERTY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MODELS = [m.key for m in CATALOG[:4]]


@st.composite
def snapshots(draw: st.DrawFn) -> tuple[Snapshot, EngineConfig]:
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    teams = [
        Team(
            id=f"t{i}",
            weight=rnd.choice([1.0, 1.0, 2.0, 0.5]),
            cohort=rnd.choice(["default", "default", "other"]),
            held=rnd.random() < 0.1,
        )
        for i in range(rnd.randint(1, 4))
    ]
    quotas = [
        Quota(
            team=t.id,
            model=m,
            nominal=rnd.choice([0, 0, 2, 4, 8, 16]),
            borrowing_limit=rnd.choice([None, None, 0, 2, 8]),
            lending_limit=rnd.choice([None, None, None, 0, 2]),
        )
        for t in teams
        for m in MODELS
        if rnd.random() < 0.7
    ]
    cohort_quotas = [
        CohortQuota(cohort=c, model=m, nominal=rnd.choice([4, 8]))
        for c in ("default", "other")
        for m in MODELS
        if rnd.random() < 0.2
    ]
    clusters: list[tuple[str, ClusterState, list[list[int | str]]]] = []
    for c in range(rnd.randint(1, 3)):
        state = rnd.choice(
            [ClusterState.ENABLED] * 4 + [ClusterState.DRAINING, ClusterState.DISABLED]
        )
        nodes: list[list[int | str]] = []
        for m in MODELS:
            for i in range(rnd.choice([0, 0, 1, 2, 3])):
                total = rnd.choice([1, 2, 4, 8])
                nodes.append([f"c{c}-{m}-{i}", m, total, total])  # name, model, total, free
        clusters.append((f"c{c}", state, nodes))
    # Running gangs placed consistently on free GPUs.
    running: list[RunningAllocation] = []
    for j in range(rnd.randint(0, 12)):
        cid, _, nodes = rnd.choice(clusters)
        if not nodes:
            continue
        model = str(rnd.choice(nodes)[1])
        g = rnd.choice([1, 2, 4])
        r = rnd.choice([1, 1, 2])
        fitting = [n for n in nodes if n[1] == model and int(n[3]) >= g]
        if len(fitting) < r:
            continue
        chosen = rnd.sample(fitting, r)
        for n in chosen:
            n[3] = int(n[3]) - g
        running.append(
            RunningAllocation(
                job_id=f"r{j}",
                team=rnd.choice(teams).id,
                cluster=cid,
                model=model,
                replicas=r,
                gpus_per_replica=g,
                priority=rnd.choice([0, 0, 5]),
                started_at=NOW - timedelta(minutes=rnd.randint(1, 600)),
                nodes=tuple(str(n[0]) for n in chosen),
                preempting=rnd.random() < 0.1,
            )
        )
    pending: list[PendingJob] = []
    for j in range(rnd.randint(0, 30)):
        explicit = rnd.random() < 0.5
        pending.append(
            PendingJob(
                id=f"p{j}",
                team=rnd.choice(teams).id if rnd.random() < 0.97 else "ghost",
                submitted_at=NOW - timedelta(minutes=rnd.randint(0, 400)),
                gpus_per_replica=rnd.choice([1, 1, 2, 4, 8]),
                replicas=rnd.choice([1, 1, 1, 2, 3]),
                priority=rnd.choice([0, 0, 0, 1, 10]),
                requirement=Requirement(
                    models=tuple(rnd.sample(MODELS, rnd.randint(1, 3))) if explicit else (),
                    min_memory_gib=rnd.choice([0, 0, 12, 24, 40]),
                ),
                policy=rnd.choice(list(Policy)),
                fallback=rnd.random() < 0.7,
            )
        )
    snap = Snapshot(
        now=NOW,
        models=CATALOG[:4],
        teams=tuple(teams),
        quotas=tuple(quotas),
        cohort_quotas=tuple(cohort_quotas),
        clusters=tuple(
            Cluster(
                id=cid,
                state=state,
                nodes=tuple(
                    Node(name=str(n[0]), model=str(n[1]), total_gpus=int(n[2]), free_gpus=int(n[3]))
                    for n in nodes
                ),
            )
            for cid, state, nodes in clusters
        ),
        running=tuple(running),
        pending=tuple(pending),
    )
    config = EngineConfig(
        lookback_per_team=rnd.choice([1000, 1000, 3]),
        starvation_wait=timedelta(minutes=rnd.choice([60, 600])),
        max_capacity_holds=rnd.choice([0, 1, 4]),
    )
    return snap, config


def node_free(snap: Snapshot) -> dict[tuple[str, str], int]:
    return {(c.id, n.name): n.free_gpus for c in snap.clusters for n in c.nodes}


def used_at_start(snap: Snapshot) -> dict[tuple[str, str], int]:
    used: dict[tuple[str, str], int] = defaultdict(int)
    for a in snap.running:
        used[(a.team, a.model)] += a.gpus
    return used


def borrowed_jobs(snap: Snapshot) -> set[str]:
    """Jobs any of whose GPUs lie above their team's nominal, counting oldest first."""
    nominal = {(q.team, q.model): q.nominal for q in snap.quotas}
    by: dict[tuple[str, str], list[RunningAllocation]] = defaultdict(list)
    for a in snap.running:
        by[(a.team, a.model)].append(a)
    out = set()
    for key, allocs in by.items():
        cum = 0
        for a in sorted(allocs, key=lambda a: (a.started_at, a.job_id)):
            cum += a.gpus
            if cum > nominal.get(key, 0):
                out.add(a.job_id)
    return out


@PROPERTY
@given(snapshots())
def test_never_more_gpus_than_free_on_any_node(case: tuple[Snapshot, EngineConfig]) -> None:
    snap, config = case
    d = decide(snap, config)
    free = node_free(snap)
    taken: dict[tuple[str, str], int] = defaultdict(int)
    for a in d.admissions:
        for n in a.node_plan:
            taken[(a.cluster, n)] += a.gpus_per_replica
    for h in d.holds:
        for n, gpus in h.nodes:
            taken[(h.cluster, n)] += gpus
    for key, gpus in taken.items():
        assert gpus <= free[key], key


@PROPERTY
@given(snapshots())
def test_never_above_nominal_plus_borrowing_limit(case: tuple[Snapshot, EngineConfig]) -> None:
    snap, config = case
    d = decide(snap, config)
    quotas = {(q.team, q.model): q for q in snap.quotas}
    used = used_at_start(snap)
    admitted: dict[tuple[str, str], int] = defaultdict(int)
    for a in d.admissions:
        admitted[(a.team, a.model)] += a.gpus
    for key, gpus in admitted.items():
        q = quotas.get(key)
        if q is None or q.borrowing_limit is None:
            continue
        assert used[key] + gpus <= q.nominal + q.borrowing_limit, key


@PROPERTY
@given(snapshots())
def test_gangs_are_complete_or_absent(case: tuple[Snapshot, EngineConfig]) -> None:
    snap, config = case
    d = decide(snap, config)
    jobs = {j.id: j for j in snap.pending}
    nodes = {(c.id, n.name): n for c in snap.clusters for n in c.nodes}
    states = {c.id: c.state for c in snap.clusters}
    for a in d.admissions:
        job = jobs[a.job_id]
        assert len(a.node_plan) == job.replicas
        assert a.gpus_per_replica == job.gpus_per_replica
        assert states[a.cluster] is ClusterState.ENABLED
        for n in a.node_plan:
            assert nodes[(a.cluster, n)].model == a.model
    # every pending job: admitted, one reason, or not considered — exactly one of them
    seen = [a.job_id for a in d.admissions] + [p.job_id for p in d.pending]
    seen += [j for nc in d.not_considered for j in nc.job_ids]
    assert sorted(seen) == sorted(jobs)
    assert [p.position for p in d.pending] == list(range(1, len(d.pending) + 1))


@PROPERTY
@given(snapshots(), st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_input_order(
    case: tuple[Snapshot, EngineConfig], rnd: random.Random
) -> None:
    snap, config = case
    d = decide(snap, config)
    assert decide(snap, config) == d
    shuffled = replace(
        snap,
        pending=tuple(rnd.sample(snap.pending, len(snap.pending))),
        running=tuple(rnd.sample(snap.running, len(snap.running))),
        clusters=tuple(rnd.sample(snap.clusters, len(snap.clusters))),
        teams=tuple(rnd.sample(snap.teams, len(snap.teams))),
    )
    assert decide(shuffled, config) == d


def _released(snap: Snapshot, victims: set[str], only: PendingJob) -> Snapshot:
    """The snapshot with ``victims`` (and every preemption under way) gone and only ``only``
    pending: what the preemptor would see once they stop."""
    leaving = victims | {a.job_id for a in snap.running if a.preempting}
    back: dict[tuple[str, str], int] = defaultdict(int)
    for a in snap.running:
        if a.job_id in leaving:
            for n in a.nodes:
                back[(a.cluster, n)] += a.gpus_per_replica
    clusters = tuple(
        replace(
            c,
            nodes=tuple(
                replace(n, free_gpus=min(n.total_gpus, n.free_gpus + back[(c.id, n.name)]))
                for n in c.nodes
            ),
        )
        for c in snap.clusters
    )
    return replace(
        snap,
        clusters=clusters,
        running=tuple(a for a in snap.running if a.job_id not in leaving),
        pending=(only,),
    )


@PROPERTY
@given(snapshots())
def test_preemption_only_of_borrowed_jobs_and_only_when_it_makes_the_job_fit(
    case: tuple[Snapshot, EngineConfig],
) -> None:
    snap, config = case
    d = decide(snap, config)
    if not d.preemptions:
        return
    borrowed = borrowed_jobs(snap)
    allocs = {a.job_id: a for a in snap.running}
    jobs = {j.id: j for j in snap.pending}
    states = {c.id: c.state for c in snap.clusters}
    nominal = {(q.team, q.model): q.nominal for q in snap.quotas}
    used = used_at_start(snap)
    victims_of: dict[str, set[str]] = defaultdict(set)
    for p in d.preemptions:
        victim = allocs[p.job_id]
        assert p.job_id in borrowed
        assert not victim.preempting
        assert victim.team != p.for_team
        assert states[victim.cluster] is ClusterState.ENABLED
        job = jobs[p.for_job]
        assert used[(job.team, victim.model)] + job.gpus <= nominal.get((job.team, victim.model), 0)
        victims_of[p.for_job].add(p.job_id)
    for job_id, victims in victims_of.items():
        after = decide(_released(snap, victims, jobs[job_id]), replace(config, preemption=False))
        assert [a.job_id for a in after.admissions] == [job_id]


@PROPERTY
@given(snapshots())
def test_a_decision_never_admits_a_held_team_or_an_invalid_job(
    case: tuple[Snapshot, EngineConfig],
) -> None:
    snap, config = case
    d: Decision = decide(snap, config)
    held = {t.id for t in snap.teams if t.held}
    known = {t.id for t in snap.teams}
    for a in d.admissions:
        assert a.team not in held and a.team in known
