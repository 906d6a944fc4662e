"""Where on a pool a replica goes: the placement rule for nodes that book devices or CPU.

The rule, in one sentence: **put each replica where the free room it leaves is the least
fragmented for the work the pool expects**, and among near-equal choices where it leaves the
least room (best fit).

*Fragmentation* of a node, in GPU units, is the sum of two parts, both measured against the
expected mix of work (``Snapshot.demand``: shapes with their frequencies):

1. **What an expected job could not use there** (the FGD paper's measure: Weng et al.,
   "Beware of Fragmentation", ATC '23). For one expected shape: if the node cannot host it at
   all (its model is not one the shape may use, its CPU left is less than the shape's, or too
   few devices have the units it needs on each) every free unit of the node is fragment for
   it; if it can, the units on devices too small for it are. A CPU-only shape can use no
   GPU, so every free unit is fragment for it. The GPU shapes are summed by the share of
   the expected GPU units they ask (frequency x units per replica), not by their count: the
   measure is of GPUs lost, and room an 8-GPU job cannot use turns away eight GPUs of work
   where room a half-GPU share cannot use turns away half of one, so a node kept whole for
   the mix's whole-node jobs counts for what they ask. A shape that may use only some
   models is weighted up further by how little of the pool those are (``pool units /
   units of its models``): a P100-only job has nowhere else to go, an unconstrained one
   has the whole pool, so room a scarce shape cannot use counts for more, and work that
   may go anywhere is drawn to it and away from the scarce room.
2. **What the node's CPU cannot feed**: the free units beyond ``CPU left / c``, where ``c``
   is the CPU the expected work asks per GPU unit it asks (CPU-only shapes included). A node
   whose CPUs go faster than its GPUs ends with GPUs nobody can start on; this part sees it
   coming before the last CPU is taken, and sends CPU-light work to CPU-poor nodes and
   CPU-heavy work to CPU-rich ones.

The replica goes to the node (and, where the portal picks the device, the device) where the
fragmentation grows least; growths within a tenth of a device are equal, and ties go to the
node left with the fewest free units, then the least CPU, then the name order. A gang is
placed replica by replica on a scratch copy, so the same rule packs its replicas onto the
fewest nodes that leave the most useful holes. Without a demand every node scores alike and
best fit decides, as it always did for whole GPUs.

Pure and standard-library only; the memo of fragmentation per node state is keyed by the
demand and the pool's size per model, so equal inputs give equal placements whatever ran
before.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence

from rules.engine.snapshot import Demand

UNBOUNDED = 1 << 62
"""CPU or memory of a node that does not report it: never the limit."""
_MEMO_LIMIT = 400_000
_PLACES = 6
"""Growths are compared rounded to a millionth of a unit: the sums behind them are added in
different orders for different nodes, and float noise must not decide between equal ones."""


class Fragmentation:
    """The expected fragment of node states against one demand mix (memoised per state)."""

    __slots__ = ("best_memo", "cpu_only", "cpu_per_unit", "groups", "mem_per_unit", "memo")

    def __init__(self, demand: Sequence[Demand], capacity: Mapping[str, int] | None = None) -> None:
        total = sum(max(0.0, d.weight) for d in demand) or 1.0
        self.cpu_only = sum(max(0.0, d.weight) for d in demand if d.gpus_per_replica <= 0) / total
        capacity = capacity or {}
        pool = sum(capacity.values())
        # A shape counts by the GPU units it brings (frequency x units per replica, scaled
        # so the GPU shapes keep their share of the mix): room an 8-GPU job cannot use
        # loses eight GPUs of work, room a half-GPU share cannot use half of one.
        gpu_weight = sum(max(0.0, d.weight) for d in demand if d.gpus_per_replica > 0)
        gpu_units = sum(max(0.0, d.weight) * d.gpus_per_replica for d in demand)
        per_unit = gpu_weight / gpu_units if gpu_units > 0 else 0.0
        grouped: dict[tuple[int, int, frozenset[str]], list[tuple[int, float]]] = {}
        for d in demand:
            if d.gpus_per_replica <= 0 or d.weight <= 0:
                continue
            n = max(1, d.share_devices)
            per = -(-d.gpus_per_replica // n)
            key = (per, n, frozenset(d.models))
            weight = d.weight / total * d.gpus_per_replica * per_unit
            if pool and d.models:
                # Scarcity: a shape that may use only some models counts, on those, in
                # proportion to how little of the pool it may use.
                room = sum(capacity.get(m, 0) for m in set(d.models))
                if room <= 0:
                    continue
                weight *= pool / room
            grouped.setdefault(key, []).append((max(0, d.cpu_milli), weight))
        # Per (units per device, devices, models): the shapes' CPU sorted, with cumulative
        # weights, so "how much of this group fits the CPU left" is one bisect.
        self.groups: list[tuple[int, int, frozenset[str], list[int], list[float], float]] = []
        for (per, n, models), members in sorted(grouped.items(), key=lambda kv: kv[0][:2]):
            members.sort()
            cum = [0.0]
            for _, w in members:
                cum.append(cum[-1] + w)
            self.groups.append((per, n, models, [c for c, _ in members], cum, cum[-1]))
        # CPU the expected work asks per GPU unit it asks (CPU-only shapes' CPU included):
        # free units beyond what a node's CPU left can feed at that rate are stranded.
        units = sum(max(0.0, d.weight) * max(0, d.gpus_per_replica) for d in demand)
        cpu = sum(max(0.0, d.weight) * max(0, d.cpu_milli) for d in demand)
        self.cpu_per_unit = cpu / units if units > 0 and cpu > 0 else 0.0
        mem = sum(max(0.0, d.weight) * max(0, d.memory_mib) for d in demand)
        self.mem_per_unit = mem / units if units > 0 and mem > 0 else 0.0
        self.memo: dict[tuple[str, int, tuple[int, ...]], float] = {}
        self.best_memo: dict[tuple[object, ...], tuple[float, tuple[int, ...]] | None] = {}

    def of(self, model: str, cpu_left: int, devices: tuple[int, ...]) -> float:
        """Expected free units of a node in this state that the expected work cannot use."""
        key = (model, cpu_left, devices)
        memo = self.memo
        value = memo.get(key)
        if value is not None:
            return value
        ordered = sorted(devices)
        small = [0]  # small[k]: units on the k smallest devices
        for left in ordered:
            small.append(small[-1] + left)
        total = small[-1]
        value = 0.0
        if total:
            value = total * self.cpu_only
            n_dev = len(ordered)
            for per, n, models, cpus, cum, weight in self.groups:
                if models and model not in models:
                    value += total * weight
                    continue
                k = bisect_left(ordered, per)  # devices too small for this shape
                if n_dev - k < n:
                    value += total * weight
                    continue
                hosted = cum[bisect_right(cpus, cpu_left)]  # the part whose CPU fits too
                value += total * (weight - hosted) + small[k] * hosted
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[key] = value
        return value

    def stranded(self, cpu_left: int, mem_left: int, devices: tuple[int, ...]) -> float:
        """Free units of a node that its CPU or memory left cannot feed at the demand's CPU
        and memory per unit (``UNBOUNDED`` or more: not known, feeds anything)."""
        fed = cpu_left / self.cpu_per_unit if self.cpu_per_unit else float("inf")
        if self.mem_per_unit:
            by_mem = mem_left / self.mem_per_unit
            if by_mem < fed:
                fed = by_mem
        left = sum(devices) - fed
        return left if left > 0 else 0.0

    def grow(
        self,
        model: str,
        cpu: int,
        devices: tuple[int, ...],
        cpu_after: int,
        after: tuple[int, ...],
        mem: int = UNBOUNDED,
        mem_after: int = UNBOUNDED,
    ) -> float:
        """How much placing something grows the node's expected fragmentation (rounded)."""
        value = self.of(model, cpu_after, after) - self.of(model, cpu, devices)
        if self.cpu_per_unit or self.mem_per_unit:
            value += self.stranded(cpu_after, mem_after, after) - self.stranded(cpu, mem, devices)
        return round(value, _PLACES)

    def best_devices(
        self,
        model: str,
        cpu: int,
        cpu_after: int,
        devices: tuple[int, ...],
        per: int,
        count: int,
        mem: int = UNBOUNDED,
        mem_after: int = UNBOUNDED,
    ) -> tuple[float, tuple[int, ...]] | None:
        """Where on a node (``devices``: units free on each) one replica of ``count`` x
        ``per`` units grows the expected fragmentation least: (growth, the devices), None
        when fewer than ``count`` devices hold ``per``. Among equal growths the fullest
        device wins (best fit), then the lowest index. Memoised per node state and ask."""
        if not self.mem_per_unit:  # memory does not count: one memo entry whatever it is
            mem = mem_after = UNBOUNDED
        key = (model, cpu, cpu_after, devices, per, count, mem, mem_after)
        memo = self.best_memo
        if key in memo:
            return memo[key]
        fit = sorted((v, j) for j, v in enumerate(devices) if v >= per)
        result: tuple[float, tuple[int, ...]] | None = None
        if len(fit) >= count:
            if count == 1:
                seen: set[int] = set()
                for v, j in fit:
                    if v in seen:  # equal devices grow the fragmentation alike
                        continue
                    seen.add(v)
                    after = (*devices[:j], v - per, *devices[j + 1 :])
                    growth = self.grow(model, cpu, devices, cpu_after, after, mem, mem_after)
                    if result is None or growth < result[0]:
                        result = (growth, (j,))
            else:
                chosen = tuple(j for _, j in fit[:count])
                after = tuple(v - per if j in chosen else v for j, v in enumerate(devices))
                result = (self.grow(model, cpu, devices, cpu_after, after, mem, mem_after), chosen)
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[key] = result
        return result


_BY_DEMAND: dict[tuple[object, ...], Fragmentation] = {}


def fragmentation_for(
    demand: tuple[Demand, ...], capacity: Mapping[str, int] | None = None
) -> Fragmentation | None:
    """The (shared, memoised) fragmentation measure of a demand mix on a pool of these
    units per model; None without a demand."""
    if not demand:
        return None
    key = (demand, tuple(sorted(capacity.items())) if capacity else ())
    frag = _BY_DEMAND.get(key)
    if frag is None:
        if len(_BY_DEMAND) >= 8:
            _BY_DEMAND.clear()
        frag = _BY_DEMAND[key] = Fragmentation(demand, capacity)
    return frag
