"""The books match the cluster under bursts: a randomised stress of the whole pipeline.

Each round is a fresh kubesim (2 × 8 A100s, time frozen) and two teams within nominal on one
cohort, so that borrowing and reclaim happen all the time. Steps, chosen at random from a
seeded generator: bursts of one- to four-GPU jobs (gangs of one or two), scheduling cycles,
dispatches in a shuffled order (Volcano sees the creates in another order than the cycle
planned them; each replica is pinned to its planned node), evictions that lag several steps
behind their preemption (slow deletes, pods that take time to terminate), time passing (jobs
finish), and the status reconcile running only now and then. The watcher's part, bindings
reaching the plans, happens after every settle except in odd rounds, where a step loses half
of them on purpose.

What a user would count, per round, all of which must be zero:

* over-admissions: a job the portal submitted whose pods are still not bound once the
  cluster had time to terminate what it was replacing (pods ``Insufficient nvidia.com/gpu``);
* extra victims: jobs preempted by a cycle for reclaims that already had their victims (the
  same jobs waiting on preemptions before and after, none new), however slow the deletes;
* stuck jobs: jobs still holding GPUs after the queue is drained and every job has had
  time to run.

``make test`` runs a short tier (``GPUPOOL_SOAK_ROUNDS``, default 2); ``make soak`` runs 50
rounds and prints each round's figures.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from clusters.bindings import node_plans_apply, pod_bindings
from clusters.dispatch import job_dispatch
from clusters.queues import TeamQueue, queues_sync
from clusters.tasks import cluster_reconcile_and_enqueue
from clusters.teardown import job_evict
from portal.jobs.services import job_submit
from portal.models import HOLDING_STATES, Job, JobState
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel, Quota
from tests.clusters.conftest import two_a100
from tests.conftest import job_body

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = int(os.environ.get("GPUPOOL_SOAK_ROUNDS", "2"))
STEPS = int(os.environ.get("GPUPOOL_SOAK_STEPS", "40"))
TERMINATION = 1  # kubesim's podTerminationSeconds below


@pytest.fixture
def sim_config() -> dict[str, Any]:
    return two_a100(podTerminationSeconds=TERMINATION)


@dataclass
class Figures:
    seed: int
    submitted: int = 0
    admitted: int = 0
    preempted: int = 0
    finished: int = 0
    over_admissions: int = 0
    extra_victims: int = 0
    stuck: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"soak seed {self.seed}: {self.submitted} submitted, {self.admitted} admissions, "
            f"{self.preempted} preemptions, {self.finished} finished; over-admissions "
            f"{self.over_admissions}, extra victims {self.extra_victims}, stuck {self.stuck}"
        )


class Round:
    def __init__(self, sim, cluster, users: dict[str, Any], seed: int) -> None:
        self.sim = sim
        self.cluster = cluster
        self.users = users
        self.rnd = random.Random(seed)
        # Gangs of up to 2 × 4 GPUs, pinned to their planned nodes; odd seeds lose bindings.
        self.one_gpu = False
        self.lossy = seed % 2 == 1
        self.figures = Figures(seed)
        self.evictions: list[tuple[int, int]] = []  # (due step, job pk)
        self.step = 0

    # -- actions --------------------------------------------------------------------------
    def submit_burst(self) -> None:
        for _ in range(self.rnd.randint(2, 8)):
            team = self.rnd.choice(sorted(self.users))
            gpus = 1 if self.one_gpu else self.rnd.choice([1, 1, 2, 4])
            replicas = 1 if self.one_gpu else self.rnd.choice([1, 1, 2])
            seconds = self.rnd.choice([60, 300, 600, 1200])
            body = job_body(
                team=team,
                name=f"soak-{self.figures.submitted}",
                command=["sh", "-c", f"sleep {seconds}"],
                replicas=replicas,
                gpus_per_replica=gpus,
                min_gpu_memory_gib=None,
            )
            job_submit(user=self.users[team], data=body)
            self.figures.submitted += 1

    def cycle(self) -> None:
        waiting_before = self.waiting_for_victims()
        result = run_cycle()
        self.figures.admitted += len(result.admitted)
        self.figures.preempted += len(result.preempted)
        for pk in result.preempted:  # the delete lags 0 to 3 steps behind (slow deletes)
            self.evictions.append((self.step + self.rnd.randint(0, 3), pk))
        self.count_extra_victims(waiting_before, result.preempted)
        admitted = list(result.admitted)
        self.rnd.shuffle(admitted)  # Volcano sees the creates in another order
        for pk in admitted:
            job_dispatch(job_id=pk)
        self.sim.settle()
        self.bindings_reach_the_plans()
        self.count_over_admissions(admitted)

    def evict_due(self) -> None:
        due = [pk for at, pk in self.evictions if at <= self.step]
        self.evictions = [(at, pk) for at, pk in self.evictions if at > self.step]
        for pk in due:
            if not job_evict(job_id=pk).done:  # pods still terminating: the task retries
                self.evictions.append((self.step + 1, pk))
        self.sim.settle()

    def advance(self) -> None:
        self.sim.advance(self.rnd.choice([5, 15, 30, 120]))
        self.bindings_reach_the_plans()

    def reconcile(self) -> None:
        assert cluster_reconcile_and_enqueue(cluster=self.cluster).ok

    def bindings_reach_the_plans(self) -> None:
        bound = pod_bindings(self.sim.list("pods"))
        if self.lossy and self.rnd.random() < 0.5:
            keep = sorted(bound, key=str)[: len(bound) // 2]
            bound = {u: bound[u] for u in keep}  # the rest of the events are lost
        node_plans_apply(bound, cluster_id=self.cluster.pk)

    # -- invariants -----------------------------------------------------------------------
    def count_over_admissions(self, admitted: list[int]) -> None:
        """Pods of what was just admitted that find no room once terminations had time."""
        if not admitted:
            return
        self.sim.advance(TERMINATION + 1)
        self.bindings_reach_the_plans()
        wanted = {
            str(u) for u in Job.objects.filter(pk__in=admitted).values_list("public_id", flat=True)
        }
        for pod in self.sim.list("pods"):
            labels = pod["metadata"].get("labels") or {}
            if labels.get("gpupool.dev/job-id") in wanted and not pod["spec"].get("nodeName"):
                if pod["metadata"].get("deletionTimestamp"):
                    continue
                self.figures.over_admissions += 1
                why = " ".join(
                    str(c.get("message") or c.get("reason") or "")
                    for c in (pod.get("status") or {}).get("conditions") or []
                    if c.get("type") == "PodScheduled"
                )
                self.figures.notes.append(
                    f"step {self.step}: {pod['metadata']['name']} unbound ({why or 'no word'}); "
                    f"{self.books()}"
                )

    def books(self) -> str:
        """Free GPUs per node in the cluster's truth and in the portal's books."""
        truth: Counter[str] = Counter()
        for pod in self.sim.list("pods"):
            node = pod["spec"].get("nodeName")
            if node and pod["status"].get("phase") not in ("Succeeded", "Failed"):
                limits = pod["spec"]["containers"][0]["resources"].get("limits") or {}
                truth[node] += int(limits.get("nvidia.com/gpu", 0))
        planned: Counter[str] = Counter()
        for plan, gpus in Job.objects.filter(state__in=HOLDING_STATES).values_list(
            "node_plan", "gpus_per_replica"
        ):
            for node in plan:
                planned[node] += gpus
        return f"bound {dict(truth)}, planned {dict(planned)}; {self.unbooked()}"

    def unbooked(self) -> str:
        """The bound pods the books do not count where they are: whose GPUs they miss."""
        jobs = {
            str(u): (state, plan, attempt)
            for u, state, plan, attempt in Job.objects.values_list(
                "public_id", "state", "node_plan", "attempt_number"
            )
        }
        missed = []
        for pod in self.sim.list("pods"):
            node = pod["spec"].get("nodeName")
            if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            labels = pod["metadata"].get("labels") or {}
            state, plan, attempt = jobs.get(labels.get("gpupool.dev/job-id", ""), ("?", [], 0))
            if state not in HOLDING_STATES or node not in plan:
                missed.append(
                    f"{pod['metadata']['name']} on {node} (job {state}, run {attempt}, "
                    f"plan {plan}, deleting {bool(pod['metadata'].get('deletionTimestamp'))})"
                )
        return "unbooked: " + (", ".join(missed) or "none")

    @staticmethod
    def waiting_for_victims() -> set[int]:
        return set(
            Job.objects.filter(state=JobState.QUEUED, wait__code="PREEMPTING").values_list(
                "pk", flat=True
            )
        )

    def count_extra_victims(self, waiting_before: set[int], preempted: list[int]) -> None:
        """Victims taken for reclaims that already had theirs: the same jobs were waiting for
        preemptions before this cycle and no new claimer came, yet more jobs were preempted
        (the issue's 2, 3, 2 and 2 victims for one reclaim while a delete was slow)."""
        if not preempted or not waiting_before:
            return
        if self.waiting_for_victims() <= waiting_before:
            self.figures.extra_victims += len(preempted)
            self.figures.notes.append(
                f"step {self.step}: {len(preempted)} more victims for {sorted(waiting_before)}"
            )

    def drain(self) -> None:
        """No new work: let everything run to its end (requeued jobs included)."""
        for _ in range(100):
            self.evictions = [(self.step, pk) for _, pk in self.evictions]
            self.evict_due()
            self.cycle()
            self.sim.advance(300)
            self.reconcile()
            if not Job.objects.exclude(
                state__in=(JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
            ).exists():
                break
        holding = Job.objects.filter(state__in=HOLDING_STATES).count()
        queued = Job.objects.filter(state=JobState.QUEUED).count()
        self.figures.stuck = holding + queued
        self.figures.finished = Job.objects.filter(state=JobState.SUCCEEDED).count()

    def run(self) -> Figures:
        actions = [
            (self.submit_burst, 3),
            (self.cycle, 5),
            (self.evict_due, 2),
            (self.advance, 1),
            (self.reconcile, 1),
        ]
        for self.step in range(STEPS):
            action = self.rnd.choices([a for a, _ in actions], weights=[w for _, w in actions])[0]
            action()
        self.drain()
        return self.figures


@pytest.fixture
def teams(cluster, vision, language, bob, charlie):
    a100 = GpuModel.objects.get(key="a100-80gb")
    for team in (vision, language):
        Quota.objects.create(team=team, gpu_model=a100, nominal=8)
    queues_sync(
        cluster=cluster,
        desired=[TeamQueue(t.slug, 100, {"nvidia.com/gpu": 16}) for t in (vision, language)],
    )
    return {"vision": bob, "language": charlie}


@pytest.mark.parametrize("seed", range(ROUNDS))
def test_books_match_the_cluster_under_bursts(sim, cluster, teams, seed):
    figures = Round(sim, cluster, teams, seed).run()
    print(figures.line())
    for note in figures.notes:  # whole: an assertion's message is cut short in the report
        print(note)
    assert figures.submitted and figures.admitted
    assert (figures.over_admissions, figures.extra_victims, figures.stuck) == (0, 0, 0), (
        figures.line(),
        figures.notes[:10],
        Counter(Job.objects.values_list("state", flat=True)),
    )
