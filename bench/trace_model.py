"""The trace and the cluster of ``trace_bench.py``: tasks and nodes read from the Alibaba
lists, the typical tasks, the tuned arrival order, and a node's state as the replay books it.

A sibling module of ``bench/trace_bench.py`` (bench/ is scripts, not a package): the script
puts bench/ on ``sys.path`` before importing it.
"""

from __future__ import annotations

import csv
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MILLI = 1000
TYPICAL_SHARE = 95  # the typical tasks cover this % of the list


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
