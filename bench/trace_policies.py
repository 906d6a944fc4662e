"""The placement policies of ``trace_bench.py``: the paper's six (Random, DotProd, GPU
clustering, GPU packing, best fit, FGD) and gpupool's engine, with the registry that
``--policy`` names (``register_policy`` adds one). The scores are described in
``trace_bench.py``'s docstring.

A sibling module of ``bench/trace_bench.py`` (bench/ is scripts, not a package): the script
puts bench/ and the repository root on ``sys.path`` before importing it.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from trace_model import MILLI, Node, Task, Typical, best_fit_device, exclusive_devices

from rules import engine
from rules.engine.capacity import NEAR
from rules.engine.placement import Fragmentation, fragmentation_for

MAX_SPEC_CPU = 128_000  # milli-CPU of the largest node: the paper's normaliser
MAX_SPEC_GPU = 8_000  # milli-GPU of the largest node
MAX_SCORE = 100

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
