"""Replay the Alibaba GPU-sharing trace (ATC '23, "Beware of Fragmentation") under a policy.

    .venv/bin/python bench/trace_bench.py --policy fgd --seed 42 [--tune 1.3] [--json]
        [--nodes FILE] [--pods FILE] [--no-shuffle] [--ties order|random]
    .venv/bin/python bench/trace_bench.py --compare [--policies random,bestfit,fgd]
        [--seeds 42,43] [--pods FILE ...] [--paper CSV] [--json]
    .venv/bin/python bench/trace_bench.py --quick      # one short compare (make bench --quick)

The experiment is the paper's (its public simulator, ``hkust-adsl/kubernetes-scheduler-simulator``,
read for the rules below; no code of it is copied). The cluster is the node list (1,213 GPU
nodes, 6,212 GPUs); each node keeps its CPU and memory left and, per GPU device, the
thousandths (milli) of the device left. The tasks are the pod list, shuffled (seeded), then
tuned to ``tune`` x the cluster's GPUs: while the list asks less, tasks drawn at random from it
(seeded, with replacement) are appended until the next draw's per-device GPU milli would pass
the target; while it asks more (multigpu50), random tasks are dropped until it does not. Each
task is placed on arrival or fails; nothing departs. After every task the harness records the
GPU milli that has arrived and the GPU milli allocated; ``alloc_pct[x]`` is the mean allocation
(% of the cluster's GPU milli) over the tasks after which the arrived GPU requests round to
``x`` % of the cluster's GPUs (as the paper's analysis does).

A node is feasible when its CPU and memory left cover the request, its GPU model is in the
task's ``gpu_spec`` (if any), and its devices fit the GPU request: a share (``gpu_milli`` < 1000)
on one device with that much left, ``num_gpu`` whole GPUs on fully free devices. The policy
scores every feasible node (an integer, higher is better); among equal best scores the first
in a seeded random order of the nodes wins, as in the paper's simulator (``--ties random``
draws one instead, which costs GPU clustering, GPU packing and FGD 3 to 6 points):

* ``random``: every feasible node alike; a share goes to a random device that fits.
* ``dotprod``: Tetris: 1 - (cpu_left/128 cores . cpu_req/128 + gpu_left/8 . gpu_req/8) / 2.
* ``clustering``: GPU clustering: nodes already holding tasks of the same GPU kind (share,
  1-GPU, 2-GPU ...) first, nodes holding only that kind best, then empty nodes, then the rest;
  fuller nodes first within each band.
* ``packing``: GPU packing: a partly used device first, then free devices of a used node, then
  an empty node (fewest GPUs first).
* ``bestfit``: least CPU and GPU left after placing (equal weights, normalised by 128 cores and
  8 GPUs).
* ``fgd``: fragmentation gradient descent. A node's fragmentation is measured against the
  *typical* tasks (the most common task shapes covering 95 % of the list, with their
  frequencies): for each typical task that the node could not host (not enough CPU, no device
  or not enough devices with enough milli, wrong model) all its idle GPU milli counts as
  fragment (so always for a CPU-only one); for one it could host, the milli on devices too
  small for it counts. The task goes where (and, for a share, to the device where) the
  expected fragmentation grows least.

Shares use best fit on devices (the fullest device that fits) except under ``random`` and
``fgd``; whole GPUs take the first fully free devices.

``random.Random(seed)`` replaces Go's ``math/rand`` (shuffle, tuning draws, node order), so a
seed here does not replay the paper's seed of the same number: compare means over seeds.

Another placement engine plugs in with ``register_policy(name, factory)``: the factory gets the
typical tasks and returns a ``Policy``; override ``Policy.evaluate`` (score one node for one
task) or, for a global decision, ``Policy.choose(task, nodes, rng)``. ``engine`` is gpupool's
own: the real ``engine.decide`` per task (see :class:`EnginePolicy`).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import statistics
import sys
import time
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rules import engine  # noqa: E402 - the pure engine, found through sys.path
from rules.engine.capacity import NEAR  # noqa: E402
from rules.engine.placement import Fragmentation, fragmentation_for  # noqa: E402

MILLI = 1000
MAX_SPEC_CPU = 128_000  # milli-CPU of the largest node: the paper's normaliser
MAX_SPEC_GPU = 8_000  # milli-GPU of the largest node
MAX_SCORE = 100
TYPICAL_SHARE = 95  # the typical tasks cover this % of the list
TRACE_DIR = Path("/work/shared/traces/alibaba-gpu-2023")
DEFAULT_NODES = TRACE_DIR / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = TRACE_DIR / "openb_pod_list_default.csv"
DEFAULT_PAPER = TRACE_DIR / "paper-results" / "allocation_by_arrived_workload.csv"
X_MAX = 130  # alloc_pct covers arrived GPU requests 0..130 % of the cluster's GPUs

# Our policy names -> the paper's sc_policy labels.
PAPER_NAMES = {
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "clustering": "03-GpuClustering",
    "packing": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}
ALIASES = {
    "gpuclustering": "clustering",
    "gpupacking": "packing",
    "dotproduct": "dotprod",
    **{label.lower(): name for name, label in PAPER_NAMES.items()},
    **{label.split("-", 1)[1].lower(): name for name, label in PAPER_NAMES.items()},
}


# ---------------------------------------------------------------------------------------------
# The trace


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    cpu: int  # milli-CPU
    mem: int  # MiB
    num_gpu: int  # devices; 0 for a CPU-only task
    milli: int  # per device, 1..1000; 0 for a CPU-only task
    spec: frozenset[str] | None  # GPU models allowed; None for any

    @property
    def gpu_total(self) -> int:
        return self.num_gpu * self.milli

    @property
    def is_share(self) -> bool:
        return self.num_gpu == 1 and self.milli < MILLI

    @property
    def shape(self) -> tuple[int, int, int, frozenset[str] | None]:
        """What a score can depend on (memory only decides feasibility)."""
        return (self.cpu, self.num_gpu, self.milli, self.spec)

    @property
    def kind(self) -> str:
        """The GPU-clustering affinity tag: no-gpu, share-gpu, or N-gpu."""
        if self.num_gpu == 0:
            return "no-gpu"
        return "share-gpu" if self.is_share else f"{self.num_gpu}-gpu"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    cpu: int
    mem: int
    gpus: int
    model: str


def _int(row: dict[str, str], key: str) -> int:
    value = (row.get(key) or "").strip()
    return int(float(value)) if value else 0


def read_nodes(path: Path | str) -> list[NodeSpec]:
    with open(path, newline="") as f:
        return [
            NodeSpec(
                r["sn"],
                _int(r, "cpu_milli"),
                _int(r, "memory_mib"),
                _int(r, "gpu"),
                (r.get("model") or "").strip(),
            )
            for r in csv.DictReader(f)
        ]


def read_tasks(path: Path | str) -> list[Task]:
    """The pod list as the paper's converter reads it: gpu_milli above 1000 is one whole device,
    a CPU-only task has no GPU milli, and a request of 0 CPU counts as 100 milli-CPU (the
    scheduler's non-zero default)."""
    tasks = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            num = _int(r, "num_gpu")
            milli = min(_int(r, "gpu_milli"), MILLI) if num > 0 else 0
            if num > 0 and milli <= 0:
                num = 0
            models = [m for m in (r.get("gpu_spec") or "").split("|") if m.strip()]
            spec = frozenset(m.strip() for m in models) if models and num > 0 else None
            tasks.append(
                Task(
                    r["name"], _int(r, "cpu_milli") or 100, _int(r, "memory_mib"), num, milli, spec
                )
            )
    return tasks


def workload_name(pods: Path | str) -> str:
    return Path(pods).stem


@dataclass(frozen=True, slots=True)
class Typical:
    cpu: int
    num_gpu: int
    milli: int
    spec: frozenset[str] | None
    freq: float
    mem: int = 0  # the shape's mean memory (MiB): memory only decides feasibility in FGD


def typical_tasks(tasks: Sequence[Task], share: int = TYPICAL_SHARE) -> list[Typical]:
    """The most common task shapes, most common first, until they cover ``share`` % of the
    list, with their frequencies renormalised to 1 (ties between equally common shapes: the
    larger shape first)."""
    counts = Counter((t.cpu, t.milli, t.num_gpu, "|".join(sorted(t.spec or ()))) for t in tasks)
    total = sum(counts.values())
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    chosen, covered = [], 0
    for key, count in ordered:
        if covered >= share * total / 100:
            break
        chosen.append((key, count))
        covered += count
    mem: dict[tuple[int, int, int, str], int] = defaultdict(int)
    for t in tasks:
        mem[(t.cpu, t.milli, t.num_gpu, "|".join(sorted(t.spec or ())))] += t.mem
    out = []
    for key, count in chosen:
        cpu, milli, num, spec = key
        models = frozenset(spec.split("|")) if spec else None
        out.append(Typical(cpu, num, milli, models, count / covered, round(mem[key] / count)))
    return out


def arrival_order(
    tasks: Sequence[Task], total_gpu_milli: int, tune: float, rng: random.Random, shuffle: bool
) -> list[Task]:
    """The list (shuffled unless ``shuffle`` is False), tuned to ``tune`` x the cluster's GPUs."""
    order = sorted(tasks, key=lambda t: t.name)
    if shuffle:
        rng.shuffle(order)
    if tune <= 0:
        return order
    target = tune * total_gpu_milli
    asked = sum(t.gpu_total for t in order)
    if asked > target:  # drop random tasks until the list asks no more than the target
        while asked > target and order:
            asked -= order.pop(rng.randrange(len(order))).gpu_total
        return order
    pool = sorted(tasks, key=lambda t: t.name)
    i = 0
    while True:  # the simulator's rule: stop at the first draw whose per-device milli overshoots
        drawn = pool[rng.randrange(len(pool))]
        if asked + drawn.milli > target:
            break
        order.append(
            Task(
                f"{drawn.name}-tuned-{i}",
                drawn.cpu,
                drawn.mem,
                drawn.num_gpu,
                drawn.milli,
                drawn.spec,
            )
        )
        asked += drawn.gpu_total
        i += 1
    return order


# ---------------------------------------------------------------------------------------------
# The cluster


class Node:
    """One node's state: CPU, memory and per-device GPU milli left, the GPU kinds it holds."""

    __slots__ = (
        "cache",
        "cpu_cap",
        "cpu_left",
        "devices",
        "frag",
        "kinds",
        "mem_cap",
        "mem_left",
        "model",
        "name",
        "ngpu",
    )

    def __init__(self, spec: NodeSpec) -> None:
        self.name = spec.name
        self.model = spec.model
        self.cpu_cap = self.cpu_left = spec.cpu
        self.mem_cap = self.mem_left = spec.mem
        self.ngpu = spec.gpus
        self.devices = [MILLI] * spec.gpus
        self.kinds: Counter[str] = Counter()
        self.cache: dict[Any, Any] = {}  # per task shape: (score, hint) or None; cleared on change
        self.frag: float | None = None  # FGD's fragmentation of the current state

    @property
    def gpu_left(self) -> int:
        return sum(self.devices)

    @property
    def free_devices(self) -> int:
        return self.devices.count(MILLI)

    def gpu_fits(self, task: Task) -> bool:
        """CPU, GPU model and devices (memory is checked apart)."""
        if self.cpu_left < task.cpu:
            return False
        if task.num_gpu == 0:
            return True
        if self.ngpu == 0 or (task.spec is not None and self.model not in task.spec):
            return False
        if task.num_gpu == 1:
            return max(self.devices) >= task.milli
        return sum(1 for d in self.devices if d >= task.milli) >= task.num_gpu

    def place(self, task: Task, devices: Sequence[int]) -> None:
        if self.cpu_left < task.cpu or self.mem_left < task.mem:
            raise ValueError(f"{task.name} does not fit {self.name}")
        if len(devices) != task.num_gpu or len(set(devices)) != len(devices):
            raise ValueError(f"{task.name}: {task.num_gpu} devices wanted, got {devices}")
        for d in devices:
            if self.devices[d] < task.milli:
                raise ValueError(f"{task.name} overfills device {d} of {self.name}")
        self.cpu_left -= task.cpu
        self.mem_left -= task.mem
        for d in devices:
            self.devices[d] -= task.milli
        if task.num_gpu:
            self.kinds[task.kind] += 1
        self.cache.clear()
        self.frag = None


def exclusive_devices(devices: Sequence[int], n: int) -> list[int]:
    """The first ``n`` fully free devices, in index order."""
    return [i for i, left in enumerate(devices) if left == MILLI][:n]


def best_fit_device(devices: Sequence[int], milli: int) -> int:
    """The fullest device that still fits (the first one on a tie)."""
    best = -1
    for i, left in enumerate(devices):
        if left >= milli and (best < 0 or left < devices[best]):
            best = i
    return best


# ---------------------------------------------------------------------------------------------
# Policies


class Policy:
    """Scores one node for one task; the harness places the task on a best-scored node.

    ``evaluate`` returns ``(score, hint)`` (an int, higher better; ``hint`` is passed back to
    ``devices``) for a node that fits the task's CPU, GPU model and devices. The harness caches
    it per node and task shape until the node changes, so it must depend on nothing else.
    """

    name = "policy"
    ties = "order"  # "order": the first best node in the replay's node order; "random": any

    def __init__(self, typical: Sequence[Typical]) -> None:
        self.typical = typical

    def evaluate(self, node: Node, task: Task) -> tuple[int, Any]:
        return 0, None

    def devices(self, node: Node, task: Task, hint: Any, rng: random.Random) -> list[int]:
        if task.num_gpu == 0:
            return []
        if task.is_share:
            return [best_fit_device(node.devices, task.milli)]
        return exclusive_devices(node.devices, task.num_gpu)

    def choose(
        self, task: Task, nodes: Sequence[Node], rng: random.Random
    ) -> tuple[Node, list[int]] | None:
        best = -(1 << 62)
        tied: list[tuple[Node, Any]] = []
        shape, mem = task.shape, task.mem
        for node in nodes:
            if node.mem_left < mem:
                continue
            cached = node.cache.get(shape, node)
            if cached is node:
                cached = node.cache[shape] = (
                    self.evaluate(node, task) if node.gpu_fits(task) else None
                )
            if cached is None:
                continue
            score = cached[0]
            if score > best:
                best, tied = score, [(node, cached[1])]
            elif score == best:
                tied.append((node, cached[1]))
        if not tied:
            return None
        # The nodes come in the replay's node order: the first of the best is the order's
        # tie-break; ``ties="random"`` draws one of them instead.
        if self.ties == "random" and len(tied) > 1:
            node, hint = tied[rng.randrange(len(tied))]
        else:
            node, hint = tied[0]
        return node, self.devices(node, task, hint, rng)


class RandomPolicy(Policy):
    """Any feasible node, uniformly (the paper draws one of the filtered nodes)."""

    name = "random"
    ties = "random"

    def devices(self, node: Node, task: Task, hint: Any, rng: random.Random) -> list[int]:
        if task.is_share:
            fits = [i for i, left in enumerate(node.devices) if left >= task.milli]
            return [fits[rng.randrange(len(fits))]]
        return super().devices(node, task, hint, rng)


class DotProdPolicy(Policy):
    name = "dotprod"

    def evaluate(self, node: Node, task: Task) -> tuple[int, Any]:
        dot = (node.cpu_left / MAX_SPEC_CPU) * (task.cpu / MAX_SPEC_CPU) + (
            node.gpu_left / MAX_SPEC_GPU
        ) * (task.gpu_total / MAX_SPEC_GPU)
        return int(MAX_SCORE * (1 - dot / 2)), None


class ClusteringPolicy(Policy):
    name = "clustering"

    def evaluate(self, node: Node, task: Task) -> tuple[int, Any]:
        if task.num_gpu == 0:
            return 0, None
        fill = MAX_SCORE // 4 * (MAX_SPEC_GPU - node.gpu_left) // MAX_SPEC_GPU
        if node.kinds.get(task.kind, 0) > 0:
            band = 3 if len(node.kinds) == 1 else 2
        else:
            band = 1 if not node.kinds else 0
        return fill + MAX_SCORE * band // 4, None


class PackingPolicy(Policy):
    name = "packing"

    def evaluate(self, node: Node, task: Task) -> tuple[int, Any]:
        if task.num_gpu == 0:
            return 0, None
        free = node.free_devices
        if free == node.ngpu:  # an empty node: fewest GPUs first
            return max(MAX_SCORE // 3 - free, free), None
        want, use_free, used = task.num_gpu, 0, []
        for i in sorted(range(node.ngpu), key=node.devices.__getitem__):
            if want == 0:
                break
            if node.devices[i] >= task.milli:
                want -= 1
                used.append(i)
                use_free += node.devices[i] == MILLI
        if use_free:
            return max(MAX_SCORE // 2 - use_free, MAX_SCORE // 3), None
        ratio = sum(node.devices[i] * 100 // MILLI for i in used)
        return max(MAX_SCORE - ratio // 10, MAX_SCORE // 2), None


class BestFitPolicy(Policy):
    """Least left after placing. The paper min-max normalises these scores to 0..100 before
    taking the best, which keeps the same best nodes, so the raw score is used."""

    name = "bestfit"

    def evaluate(self, node: Node, task: Task) -> tuple[int, Any]:
        left = (node.cpu_left - task.cpu) / MAX_SPEC_CPU * 0.5 + (
            node.gpu_left - task.gpu_total
        ) / MAX_SPEC_GPU * 0.5
        return int((1.0 - left) * MAX_SCORE), None


class FgdPolicy(Policy):
    """Fragmentation gradient descent against the typical tasks."""

    name = "fgd"

    def __init__(self, typical: Sequence[Typical]) -> None:
        super().__init__(typical)
        # CPU-only typical tasks count a node's idle GPU milli as fragment whatever its state.
        self.cpu_only = sum(t.freq for t in typical if t.milli == 0)
        groups: dict[tuple[int, int, frozenset[str] | None], list[Typical]] = defaultdict(list)
        for t in typical:
            if t.milli:
                groups[(t.milli, t.num_gpu, t.spec)].append(t)
        self.groups = []
        for (milli, num, spec), members in groups.items():
            members.sort(key=lambda t: t.cpu)
            cum, running = [0.0], 0.0
            for t in members:
                running += t.freq
                cum.append(running)
            self.groups.append((milli, num, spec, [t.cpu for t in members], cum, running))

    def fragmentation(self, model: str, cpu_left: int, devices: Sequence[int]) -> float:
        """Expected idle GPU milli that a typical task could not use on this node state."""
        ordered = sorted(devices)
        small = [0]  # small[i]: milli on the i smallest devices
        for left in ordered:
            small.append(small[-1] + left)
        total = small[-1]
        if total == 0:
            return 0.0
        frag = total * self.cpu_only
        n = len(ordered)
        for milli, num, spec, cpus, cum, group_freq in self.groups:
            if spec is not None and model not in spec:
                frag += total * group_freq
                continue
            k = bisect_left(ordered, milli)  # devices too small for this task
            if n - k < num:
                frag += total * group_freq
                continue
            hosted = cum[bisect_right(cpus, cpu_left)]  # typical tasks that fit CPU too
            frag += total * (group_freq - hosted) + small[k] * hosted
        return frag

    def node_frag(self, node: Node) -> float:
        if node.frag is None:
            node.frag = self.fragmentation(node.model, node.cpu_left, node.devices)
        return node.frag

    @staticmethod
    def _score(before: float, after: float) -> int:
        return int(1.0 / (1.0 + math.exp(-(before - after) / 1000)) * MAX_SCORE)

    def evaluate(self, node: Node, task: Task) -> tuple[int, Any]:
        before = self.node_frag(node)
        cpu_after = node.cpu_left - task.cpu
        if task.is_share:
            best, best_dev, seen = -1, -1, set()
            for i, left in enumerate(node.devices):
                if left < task.milli or left in seen:  # equal devices give equal scores
                    continue
                seen.add(left)
                after_devices = list(node.devices)
                after_devices[i] -= task.milli
                score = self._score(
                    before, self.fragmentation(node.model, cpu_after, after_devices)
                )
                if score > best:
                    best, best_dev = score, i
            return best, best_dev
        after_devices = list(node.devices)
        for i in exclusive_devices(node.devices, task.num_gpu):
            after_devices[i] -= task.milli
        return self._score(before, self.fragmentation(node.model, cpu_after, after_devices)), None

    def devices(self, node: Node, task: Task, hint: Any, rng: random.Random) -> list[int]:
        if task.is_share:
            return [hint]
        return super().devices(node, task, hint, rng)


def _model_name(node: Node) -> tuple[str, str]:
    return (node.model, node.name)


class EnginePolicy(Policy):
    """gpupool's own engine: each GPU task is one ``engine.decide`` over the snapshot types
    the cycle builds, one task at a time, as the paper's harness places them.

    How the trace maps onto gpupool's types:

    * every node is a node of a **shared pool** of its GPU model (``GpuModel.shared_of``),
      booked per device (``Node.devices``: the milli left on each GPU; a device is 1,000
      units), with its CPU and memory left (``Node.cpu_free``, ``memory_free``); the portal
      pins the device (``device_policy`` "");
    * a share (``gpu_milli`` < 1000) is a ``PendingJob`` of that many units on one device; a
      task of N whole GPUs asks 1,000 units on each of N devices (``share_devices`` = N: HAMi's
      ``nvidia.com/gpu: N`` with a whole device's memory each); its CPU and memory are
      ``cpu_milli`` and ``memory_mib``; a ``gpu_spec`` is the user's model list
      (``Requirement.models``), else every model is a candidate, cheapest first (all cost 1
      here, so by key);
    * ``Snapshot.demand`` is the list's typical tasks (the shapes covering 95 % of it, with
      their frequencies): what FGD is given too;
    * one team, quota without bound, nothing running (the nodes' free counts already net out
      what was placed; running jobs matter only to quota, fair share and reclaim).

    A CPU-only task asks no GPU, so gpupool never places it (the cluster's own scheduler
    does): the harness puts it where the engine's placement rule would, the node whose
    expected fragmentation grows least (``rules.engine.placement``; within a tenth of a
    device), ties as the engine breaks them: the fewest free GPU units, then the least CPU
    left, then the name order.
    """

    name = "engine"

    def __init__(self, typical: Sequence[Typical]) -> None:
        super().__init__(typical)
        self.demand = tuple(
            engine.Demand(
                gpus_per_replica=t.milli * t.num_gpu,
                share_devices=max(1, t.num_gpu),
                cpu_milli=t.cpu,
                memory_mib=t.mem,
                models=tuple(sorted(t.spec or ())),
                weight=t.freq,
            )
            for t in typical
        )
        self.frag: Fragmentation | None = None  # set once the nodes are known
        self.by_name: dict[str, Node] = {}
        self.order: list[str] = []
        self.position: dict[str, int] = {}
        self.node_list: list[engine.Node] = []
        self.engine_nodes: dict[str, engine.Node] = {}
        self.models: tuple[engine.GpuModel, ...] = ()
        self.quotas: tuple[engine.Quota, ...] = ()
        self.changed: Node | None = None
        self.now = datetime(2023, 7, 1, tzinfo=UTC)
        self.count = 0

    def _setup(self, nodes: Sequence[Node]) -> None:
        self.by_name = {n.name: n for n in nodes}
        # Grouped by model (the engine makes one pool per model and groups runs of nodes),
        # by name within a model; the engine orders each pool by name itself.
        self.order = [n.name for n in sorted((n for n in nodes if n.ngpu), key=_model_name)]
        kinds = sorted({n.model for n in nodes if n.ngpu})
        self.models = tuple(
            engine.GpuModel(key=k, name=k, memory_gib=MILLI, shared_of=f"{k}-card") for k in kinds
        )
        self.quotas = tuple(engine.Quota(team="trace", model=k, nominal=1 << 40) for k in kinds)
        capacity: dict[str, int] = {}
        for n in nodes:
            if n.ngpu:
                capacity[n.model] = capacity.get(n.model, 0) + n.ngpu * MILLI
        self.frag = fragmentation_for(self.demand, capacity)
        self.position = {name: i for i, name in enumerate(self.order)}
        self.node_list = [None] * len(self.order)  # type: ignore[list-item]
        for name in self.order:
            self._refresh(self.by_name[name])

    def _refresh(self, node: Node) -> None:
        self.node_list[self.position[node.name]] = self.engine_nodes[node.name] = engine.Node(
            name=node.name,
            model=node.model,
            total_gpus=node.ngpu * MILLI,
            free_gpus=sum(node.devices),
            devices=tuple(node.devices),
            cpu_free=node.cpu_left,
            memory_free=node.mem_left,
        )

    def choose(
        self, task: Task, nodes: Sequence[Node], rng: random.Random
    ) -> tuple[Node, list[int]] | None:
        if not self.by_name:
            self._setup(nodes)
        if self.changed is not None:  # the harness placed the last choice on it since
            if self.changed.ngpu:
                self._refresh(self.changed)
            self.changed = None
        chosen = self._cpu_only(task) if task.num_gpu == 0 else self._decide(task)
        if chosen is not None:
            self.changed = chosen[0]
        return chosen

    def _decide(self, task: Task) -> tuple[Node, list[int]] | None:
        self.count += 1
        job = engine.PendingJob(
            id=f"t{self.count}",
            team="trace",
            submitted_at=self.now,
            gpus_per_replica=task.milli * task.num_gpu,
            share_devices=task.num_gpu,
            cpu_milli=task.cpu,
            memory_mib=task.mem,
            requirement=engine.Requirement(shared=True, models=tuple(sorted(task.spec or ()))),
        )
        snapshot = engine.Snapshot(
            now=self.now,
            models=self.models,
            teams=(engine.Team(id="trace"),),
            quotas=self.quotas,
            clusters=(engine.Cluster(id="trace", nodes=tuple(self.node_list)),),
            pending=(job,),
            demand=self.demand,
        )
        decision = engine.decide(snapshot)
        if not decision.admissions:
            return None
        admission = decision.admissions[0]
        node = self.by_name[admission.node_plan[0]]
        return node, [int(d) for d in admission.device_plan[0].split("+")]

    def _cpu_only(self, task: Task) -> tuple[Node, list[int]] | None:
        frag = self.frag
        best: tuple[int, int, int, str] | None = None
        cpu, mem = task.cpu, task.mem
        for node in self.node_list:  # the engine's view: the same numbers, kept as tuples
            left = node.cpu_free
            assert left is not None and node.memory_free is not None
            if left < cpu or node.memory_free < mem:
                continue
            grown = 0.0
            if frag is not None:
                m = node.memory_free
                grown = frag.grow(
                    node.model, left, node.devices, left - cpu, node.devices, m, m - mem
                )
            # As the engine ranks nodes: growths within a tenth of a device are equal, then
            # the fewest free GPU units, then the least CPU left, then the name.
            key = (round(grown / (MILLI / NEAR)), node.free_gpus, left - cpu, node.name)
            if best is None or key < best:
                best = key
        if best is None:
            return None
        return self.by_name[best[3]], []


POLICIES: dict[str, Callable[[Sequence[Typical]], Policy]] = {
    "random": RandomPolicy,
    "dotprod": DotProdPolicy,
    "clustering": ClusteringPolicy,
    "packing": PackingPolicy,
    "bestfit": BestFitPolicy,
    "fgd": FgdPolicy,
    "engine": EnginePolicy,
}


def register_policy(name: str, factory: Callable[[Sequence[Typical]], Policy]) -> None:
    """Make ``--policy NAME`` build ``factory(typical_tasks)``."""
    POLICIES[name] = factory


def policy_name(name: str) -> str:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in POLICIES:
        raise SystemExit(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return key


# ---------------------------------------------------------------------------------------------
# The replay


@dataclass
class Replay:
    policy: str
    seed: int
    workload: str
    tune: float
    total_gpus: int
    tasks: int = 0
    placed: int = 0
    failed: int = 0
    failed_gpu_milli: int = 0
    seconds: float = 0.0
    frag_pct: float = 0.0  # the final cluster's FGD fragmentation, % of its GPUs
    alloc_pct: list[float | None] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list, repr=False)
    placements: list[tuple[Task, Node, list[int]]] = field(default_factory=list, repr=False)

    def at(self, x: int) -> float | None:
        return self.alloc_pct[x] if x < len(self.alloc_pct) else None

    def as_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "seed": self.seed,
            "workload": self.workload,
            "tune": self.tune,
            "total_gpus": self.total_gpus,
            "tasks": self.tasks,
            "placed": self.placed,
            "failed": self.failed,
            "seconds": round(self.seconds, 2),
            "frag_pct": self.frag_pct,
            "alloc_pct": self.alloc_pct,
        }


def allocation_curve(
    samples: Iterable[tuple[int, int]], total_gpus: int, x_max: int = X_MAX
) -> list[float | None]:
    """``samples``: (arrived GPU milli, allocated GPU milli) after each task. For each whole %
    x of arrived GPU requests, the mean allocation (% of the cluster's GPU milli) over the
    samples whose arrival rounds to x (those within x +- 1 when none does; None when still
    none), as the paper's analysis computes it."""
    by_x: dict[int, list[float]] = defaultdict(list)
    for arrived, used in samples:
        by_x[round(arrived / total_gpus / 10)].append(round(used / total_gpus / 10, 2))
    curve: list[float | None] = []
    for x in range(x_max + 1):
        values = by_x.get(x) or [v for y in (x - 1, x, x + 1) for v in by_x.get(y, ())]
        curve.append(round(statistics.fmean(values), 2) if values else None)
    return curve


def fragmentation_pct(cluster: Sequence[Node], typical: Sequence[Typical]) -> float:
    """The cluster's fragmentation as the FGD paper measures it (the idle GPU milli that the
    typical tasks, by frequency, could not use where it lies), as % of the cluster's GPUs:
    the same yardstick for every policy."""
    measure = FgdPolicy(typical)
    frag = sum(measure.fragmentation(n.model, n.cpu_left, n.devices) for n in cluster if n.ngpu)
    gpus = sum(n.ngpu for n in cluster) * MILLI
    return round(100 * frag / gpus, 2) if gpus else 0.0


def perturb(
    nodes: Sequence[NodeSpec], tasks: Sequence[Task], seed: int
) -> tuple[list[NodeSpec], list[Task]]:
    """A cluster and a list that are not the files given, for checking that a policy is not
    fitted to them: as many nodes, drawn from the list with replacement; as many tasks,
    drawn with replacement; and every task shape (CPU, memory, GPUs, model list) moved
    apart: its CPU and memory scaled by a factor in 0.7..1.3, a share's thousandths by one
    in 0.8..1.2 (to the nearest 10, within 10..990), one draw per shape so the list keeps
    as many shapes as it had. All seeded by ``seed``."""
    rng = random.Random(f"perturb-{seed}")
    picked = [nodes[rng.randrange(len(nodes))] for _ in nodes]
    new_nodes = [
        NodeSpec(f"p{seed}-{i:05d}", n.cpu, n.mem, n.gpus, n.model) for i, n in enumerate(picked)
    ]
    moved: dict[tuple[int, int, int, int, frozenset[str] | None], tuple[int, int, int]] = {}
    for t in sorted(tasks, key=lambda t: t.name):
        key = (t.cpu, t.mem, t.num_gpu, t.milli, t.spec)
        if key not in moved:
            scale = rng.uniform(0.7, 1.3)
            milli = t.milli
            if t.is_share:
                milli = min(990, max(10, round(milli * rng.uniform(0.8, 1.2) / 10) * 10))
            moved[key] = (
                max(100, round(t.cpu * scale / 100) * 100),
                max(1, round(t.mem * scale)),
                milli,
            )
    new_tasks = []
    for i in range(len(tasks)):
        t = tasks[rng.randrange(len(tasks))]
        cpu, mem, milli = moved[(t.cpu, t.mem, t.num_gpu, t.milli, t.spec)]
        new_tasks.append(Task(f"p{seed}-{i:06d}", cpu, mem, t.num_gpu, milli, t.spec))
    return new_nodes, new_tasks


def replay(
    nodes: Sequence[NodeSpec],
    tasks: Sequence[Task],
    policy: str,
    seed: int,
    tune: float = 1.3,
    workload: str = "",
    shuffle: bool = True,
    keep: bool = False,
    ties: str = "order",
) -> Replay:
    """Place the tuned, ordered tasks one by one; ``keep`` keeps the nodes and placements.

    ``ties="order"``: among equally scored nodes the first in a seeded random order of the
    nodes wins (the paper's simulator prefixes node names with a random permutation and its
    scheduler keeps the first best); ``ties="random"``: a uniform draw among them."""
    began = time.process_time()
    rng = random.Random(seed)
    cluster = [Node(n) for n in sorted(nodes, key=lambda n: n.name)]
    total_gpus = sum(n.ngpu for n in cluster)
    typical = typical_tasks(tasks)
    chooser = POLICIES[policy_name(policy)](typical)
    if not isinstance(chooser, RandomPolicy):
        chooser.ties = ties
    order = arrival_order(tasks, total_gpus * MILLI, tune, rng, shuffle)
    rng.shuffle(cluster)  # the node order that breaks ties
    result = Replay(policy_name(policy), seed, workload, tune, total_gpus, tasks=len(order))
    arrived = used = 0
    samples = []
    for task in order:
        arrived += task.gpu_total
        choice = chooser.choose(task, cluster, rng)
        if choice is None:
            result.failed += 1
            result.failed_gpu_milli += task.gpu_total
        else:
            node, devices = choice
            node.place(task, devices)
            used += task.gpu_total
            result.placed += 1
            if keep:
                result.placements.append((task, node, devices))
        samples.append((arrived, used))
    result.alloc_pct = allocation_curve(samples, total_gpus)
    result.seconds = time.process_time() - began
    result.frag_pct = fragmentation_pct(cluster, typical)
    if keep:
        result.nodes = cluster
    return result


# ---------------------------------------------------------------------------------------------
# The paper's figures


def read_paper(path: Path | str = DEFAULT_PAPER) -> dict[tuple[str, str], dict[int, list[float]]]:
    """(workload, our policy name) -> {seed: [alloc at 0..130 %]} from the paper's CSV."""
    out: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(dict)
    labels = {label: name for name, label in PAPER_NAMES.items()}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            name = labels.get(row["sc_policy"])
            if name is None:
                continue
            values = [float(row[str(x)]) if row.get(str(x)) else math.nan for x in range(X_MAX + 1)]
            out[(row["workload"], name)][int(float(row["seed"]))] = values
    return dict(out)


def paper_mean(
    paper: dict[tuple[str, str], dict[int, list[float]]], workload: str, policy: str, x: int
) -> float | None:
    runs = paper.get((workload, policy))
    if not runs:
        return None
    values = [v[x] for v in runs.values() if not math.isnan(v[x])]
    return statistics.fmean(values) if values else None


def _fmt(v: float | None, width: int = 7, sign: bool = False) -> str:
    if v is None:
        return "-".rjust(width)
    return f"{v:+{width}.2f}" if sign else f"{v:{width}.2f}"


def compare(
    nodes_path: Path,
    pods_paths: Sequence[Path],
    policies: Sequence[str],
    seeds: Sequence[int],
    tune: float,
    paper_path: Path,
    as_json: bool,
    shuffle: bool = True,
    ties: str = "order",
    perturbed: int | None = None,
    markdown: bool = False,
) -> int:
    """Policies x lists x seeds: allocation at 100 % and 130 % of arrivals, what is left
    unallocated at 130 %, the final fragmentation, beside the paper's figures (none for a
    perturbed list: it is not the paper's)."""
    base_nodes = read_nodes(nodes_path)
    paper = read_paper(paper_path) if paper_path.exists() and perturbed is None else {}
    rows = []
    if markdown:
        print(
            "| list | policy | ours @100 | paper @100 | ours @130 | paper @130 |"
            " ours unalloc | paper unalloc | ours frag |"
        )
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    elif not as_json:
        print(
            f"{len(base_nodes)} nodes, {sum(n.gpus for n in base_nodes)} GPUs;"
            f" seeds {','.join(map(str, seeds))}; tune {tune}; ties by {ties};"
            + (f" perturbed with seed {perturbed};" if perturbed is not None else "")
            + " paper = mean of its 10 seeds; unalloc = 100 - alloc@130;"
            " frag = FGD's measure of the final cluster, % of its GPUs"
        )
        print(
            f"{'list':<13} {'policy':<11} {'ours@100':>8} {'paper':>7} {'diff':>6}"
            f" {'ours@130':>8} {'paper':>7} {'diff':>6} {'unalloc':>7} {'paper':>7}"
            f" {'frag':>6} {'sd@130':>6} {'s/run':>6}"
        )
    for pods_path in pods_paths:
        nodes, tasks = base_nodes, read_tasks(pods_path)
        if perturbed is not None:
            nodes, tasks = perturb(base_nodes, tasks, perturbed)
        workload = workload_name(pods_path)
        short = workload.removeprefix("openb_pod_list_")
        for policy in policies:
            name = policy_name(policy)
            runs = [
                replay(nodes, tasks, name, s, tune, workload, shuffle, ties=ties) for s in seeds
            ]
            row: dict[str, Any] = {"workload": workload, "policy": name, "seeds": list(seeds)}
            if perturbed is not None:
                row["perturbed"] = perturbed
            for x in (100, 130):
                ours = [r.at(x) for r in runs if r.at(x) is not None]
                mine = statistics.fmean(ours) if ours else None
                theirs = paper_mean(paper, workload, name, x)
                row[f"ours_{x}"] = None if mine is None else round(mine, 2)
                row[f"paper_{x}"] = None if theirs is None else round(theirs, 2)
                row[f"diff_{x}"] = (
                    None if mine is None or theirs is None else round(mine - theirs, 2)
                )
            row["unalloc"] = None if row["ours_130"] is None else round(100 - row["ours_130"], 2)
            row["paper_unalloc"] = (
                None if row["paper_130"] is None else round(100 - row["paper_130"], 2)
            )
            row["frag"] = round(statistics.fmean(r.frag_pct for r in runs), 2)
            at130 = [r.at(130) for r in runs if r.at(130) is not None]
            row["sd_130"] = round(statistics.pstdev(at130), 2) if len(at130) > 1 else None
            row["seconds_per_run"] = round(statistics.fmean(r.seconds for r in runs), 1)
            rows.append(row)
            if as_json:
                continue
            if markdown:
                label = PAPER_NAMES.get(name, name).split("-", 1)[-1]
                cells = [
                    _fmt(row[k], 0).strip()
                    for k in (
                        "ours_100",
                        "paper_100",
                        "ours_130",
                        "paper_130",
                        "unalloc",
                        "paper_unalloc",
                        "frag",
                    )
                ]
                print(f"| {short} | {label} | " + " | ".join(cells) + " |", flush=True)
                continue
            print(
                f"{short:<13} {name:<11} {_fmt(row['ours_100'], 8)} {_fmt(row['paper_100'])}"
                f" {_fmt(row['diff_100'], 6, True)} {_fmt(row['ours_130'], 8)}"
                f" {_fmt(row['paper_130'])} {_fmt(row['diff_130'], 6, True)}"
                f" {_fmt(row['unalloc'])} {_fmt(row['paper_unalloc'])} {_fmt(row['frag'], 6)}"
                f" {_fmt(row['sd_130'], 6)} {row['seconds_per_run']:6.1f}",
                flush=True,
            )
    if as_json:
        print(json.dumps(rows))
    return 0


def print_table(result: Replay) -> None:
    print(
        f"{result.workload} under {result.policy}, seed {result.seed}, tune {result.tune}:"
        f" {result.tasks} tasks, {result.placed} placed, {result.failed} failed"
        f" ({result.failed_gpu_milli / MILLI:.1f} GPUs asked by failed tasks);"
        f" {result.seconds:.1f} s CPU"
    )
    print("arrived % of GPUs -> allocated % of GPUs")
    for x in range(0, X_MAX + 1, 10):
        print(f"  {x:4d} {_fmt(result.at(x))}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES)
    parser.add_argument("--pods", type=Path, nargs="+", default=[DEFAULT_PODS])
    parser.add_argument("--policy", default="fgd")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument(
        "--json", action="store_true", help="one JSON object (a list with --compare)"
    )
    parser.add_argument("--no-shuffle", action="store_true", help="place the list in its own order")
    parser.add_argument(
        "--compare", action="store_true", help="policies x seeds x lists vs the paper"
    )
    parser.add_argument("--policies", default=",".join(PAPER_NAMES))
    parser.add_argument("--seeds", default="42,43")
    parser.add_argument("--paper", type=Path, default=DEFAULT_PAPER)
    parser.add_argument("--quick", action="store_true", help="compare bestfit and fgd, one seed")
    parser.add_argument(
        "--ties",
        choices=("order", "random"),
        default="order",
        help="equal scores: first in a seeded node order (the paper's), or a uniform draw",
    )
    parser.add_argument(
        "--perturb",
        type=int,
        default=None,
        metavar="N",
        help="replay a resampled node list and a resampled, jittered pod list (seed N)",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="--compare as a Markdown table (docs)"
    )
    args = parser.parse_args(argv)
    if not args.nodes.exists():
        print(f"no node list at {args.nodes} (see /work/shared/traces/README.md)", file=sys.stderr)
        return 2
    shuffle = not args.no_shuffle
    if args.quick or args.compare:
        policies = ["bestfit", "fgd"] if args.quick else args.policies.split(",")
        seeds = [42] if args.quick else [int(s) for s in args.seeds.split(",") if s.strip()]
        return compare(
            args.nodes,
            args.pods,
            [p for p in policies if p.strip()],
            seeds,
            args.tune,
            args.paper,
            args.json,
            shuffle=shuffle,
            ties=args.ties,
            perturbed=args.perturb,
            markdown=args.markdown,
        )
    pods = args.pods[0]
    nodes, tasks = read_nodes(args.nodes), read_tasks(pods)
    if args.perturb is not None:
        nodes, tasks = perturb(nodes, tasks, args.perturb)
    result = replay(
        nodes,
        tasks,
        args.policy,
        args.seed,
        args.tune,
        workload_name(pods),
        shuffle=shuffle,
        ties=args.ties,
    )
    if args.json:
        print(json.dumps(result.as_json()))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
