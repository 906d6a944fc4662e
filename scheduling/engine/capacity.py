"""In-cycle capacity: free GPUs of one model in one cluster, node by node.

Nodes are bucketed by their free GPU count so that a gang's fit is a walk over at most
``max GPUs per node`` buckets, not over nodes: the check costs the same on 20 nodes or 2,000.

A pool whose nodes report more than a GPU count (a shared pool's free units per device, or
any node's free CPU and memory) is *booked per device*: ``general`` is set, and the ``*_ask``
methods check a replica against one node's devices, CPU and memory, and place it by the rule
of ``scheduling.engine.placement``. A pool whose nodes report only counts takes the bucket
walk above, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduling.engine.placement import Fragmentation
from scheduling.engine.snapshot import ClusterState, Node

UNBOUNDED = 1 << 62
"""CPU or memory of a node that does not report it: never the limit."""

Ask = tuple[int, int, int, int, int]
"""What one replica asks of one node: (units, devices they are split over, compute % per
device, milli-CPU, MiB of memory)."""

PLAIN: tuple[int, int, int, int] = (1, 0, 0, 0)
"""An ask's tail (devices, compute, CPU, memory) when it says nothing beyond the units."""


def ask_of(units: int, tail: tuple[int, int, int, int]) -> Ask:
    return (units, max(1, tail[0]), tail[1], tail[2], tail[3])


class Pool:
    """Free GPUs of one GPU model in one cluster (and one ``Node.group`` of it); mutated as
    the cycle admits jobs.

    ``buckets[f]`` holds the indices of the nodes with exactly ``f`` usable free GPUs, as an
    insertion-ordered dict used as an ordered set (O(1) add, remove and "take one").
    """

    __slots__ = (
        "buckets",
        "cluster",
        "cores",
        "cpu",
        "dev",
        "device_size",
        "dpolicy",
        "free",
        "free_total",
        "general",
        "group",
        "held",
        "ids",
        "index",
        "key",
        "max_total",
        "mem",
        "model",
        "names",
        "out_of_service",
        "state",
        "total",
        "total_gpus",
    )

    def __init__(
        self,
        cluster: str,
        state: ClusterState,
        model: str,
        nodes: Iterable[Node],
        group: str = "",
        shared: bool = False,
        device_size: int = 0,
    ):
        ordered = sorted(nodes, key=lambda n: n.name)
        self.cluster = cluster
        self.state = state
        self.model = model
        self.group = group
        self.key = (cluster, model, group)
        """A pool's identity: one cluster's nodes of one model under one ``Node.group``."""
        self.names = [n.name for n in ordered]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.total = [max(0, n.total_gpus) for n in ordered]
        self.free = [max(0, min(n.free_gpus, t)) for n, t in zip(ordered, self.total, strict=True)]
        self.held = [0] * len(ordered)
        self.max_total = max(self.total, default=0)
        self.total_gpus = sum(self.total)
        self.out_of_service = sum(max(0, n.out_of_service_gpus) for n in ordered)
        self._books(ordered, shared, device_size)
        self._bucket()

    def _books(self, ordered: list[Node], shared: bool, device_size: int) -> None:
        """The per-device, CPU and memory books, when any node reports them."""
        self.dev: list[list[int]] | None = None
        self.cores: list[list[int] | None] | None = None
        self.ids: list[tuple[str, ...]] | None = None
        self.dpolicy: list[str] | None = None
        self.cpu: list[int] | None = None
        self.mem: list[int] | None = None
        self.device_size = device_size
        with_devices = shared and any(n.devices for n in ordered)
        with_cpu = any(n.cpu_free is not None for n in ordered)
        with_mem = any(n.memory_free is not None for n in ordered)
        self.general = with_devices or with_cpu or with_mem
        if with_devices:
            free = self.free
            # A node that reports no devices counts as one device: the node-wide books.
            self.dev = [
                [max(0, d) for d in n.devices] if n.devices else [free[i]]
                for i, n in enumerate(ordered)
            ]
            self.cores = [
                list(n.device_cores)
                if len(n.device_cores) == len(n.devices) and n.devices
                else None
                for n in ordered
            ]
            self.ids = [
                n.device_ids if len(n.device_ids) == len(n.devices) else () for n in ordered
            ]
            self.dpolicy = [n.device_policy for n in ordered]
            for i, devs in enumerate(self.dev):
                if sum(devs) < free[i]:
                    free[i] = sum(devs)
            if not device_size:
                self.device_size = max((max(d, default=0) for d in self.dev), default=0)
        if with_cpu:
            self.cpu = [UNBOUNDED if n.cpu_free is None else max(0, n.cpu_free) for n in ordered]
        if with_mem:
            self.mem = [
                UNBOUNDED if n.memory_free is None else max(0, n.memory_free) for n in ordered
            ]

    def _bucket(self) -> None:
        self.free_total = sum(self.free)
        self.buckets: list[dict[int, None]] = [{} for _ in range(self.max_total + 1)]
        # Reversed so that "take the last one" yields the lowest node name first.
        for i in reversed(range(len(self.free))):
            self.buckets[self.free[i]][i] = None

    # -- reading -----------------------------------------------------------------------------

    def max_block(self) -> int:
        """The largest number of free GPUs on one node."""
        buckets = self.buckets
        for f in range(len(buckets) - 1, 0, -1):
            if buckets[f]:
                return f
        return 0

    def fits(self, gpus_per_replica: int, replicas: int) -> bool:
        """Whether ``replicas`` replicas of ``gpus_per_replica`` fit, each on one node."""
        buckets = self.buckets
        slots = 0
        for f in range(len(buckets) - 1, gpus_per_replica - 1, -1):
            b = buckets[f]
            if b:
                slots += len(b) * (f // gpus_per_replica)
                if slots >= replicas:
                    return True
        return False

    def could_ever_fit(self, gpus_per_replica: int, replicas: int) -> bool:
        """Whether the gang fits this pool when every node is empty."""
        slots = 0
        for t in self.total:
            slots += t // gpus_per_replica
            if slots >= replicas:
                return True
        return False

    def empty_slots(self, gpus_per_replica: int) -> int:
        return sum(t // gpus_per_replica for t in self.total)

    def plan(self, gpus_per_replica: int, replicas: int) -> tuple[list[int], int] | None:
        """Best-fit placement without mutating: (node index per replica, leftover GPUs).

        Best fit: nodes with the fewest free GPUs that still take a replica are filled first,
        so large free blocks stay whole for large jobs. ``leftover`` is what stays free on the
        nodes used. Call :meth:`fits` first; this walks nodes.
        """
        buckets = self.buckets
        remaining = replicas
        chosen: list[int] = []
        leftover = 0
        for f in range(gpus_per_replica, len(buckets)):
            b = buckets[f]
            if not b:
                continue
            per_node = f // gpus_per_replica
            for i in reversed(b):
                k = per_node if per_node < remaining else remaining
                chosen.extend([i] * k)
                leftover += f - k * gpus_per_replica
                remaining -= k
                if remaining == 0:
                    return chosen, leftover
        return None

    # -- writing -----------------------------------------------------------------------------

    def _set_free(self, node: int, value: int) -> None:
        free = self.free
        del self.buckets[free[node]][node]
        self.free_total += value - free[node]
        free[node] = value
        self.buckets[value][node] = None

    def take(self, node: int, gpus: int) -> None:
        """Charge ``gpus`` on node index ``node`` (an admission or a reservation). On a pool
        booked per device the units come off the fullest devices first (what a reservation
        or a hold withdraws; an admission names its devices with :meth:`take_ask`)."""
        self._set_free(node, self.free[node] - gpus)
        if self.dev is not None:
            devs = self.dev[node]
            left = gpus
            for j in sorted(range(len(devs)), key=devs.__getitem__):
                if left <= 0:
                    break
                k = min(devs[j], left)
                devs[j] -= k
                left -= k

    def reset_free(self, free: Mapping[int, int]) -> None:
        """Set the free GPUs of the nodes at these indexes (clamped to 0..total), ordering
        the buckets as a new pool would: which node a placement takes first depends on that
        order, and a forecast's carried pools must place as a pool made from the nodes."""
        for i, value in free.items():
            value = max(0, min(value, self.total[i]))
            if self.dev is not None:
                self._devices_to(i, value)
            self.free[i] = value
        self._bucket()

    def _devices_to(self, i: int, value: int) -> None:
        """Bring a node's device books to ``value`` units free in all (a forecast's step
        frees or takes whole nodes' counts): units come back to the emptiest devices up to
        the device size, and go from the fullest first."""
        devs = self.dev[i]  # type: ignore[index]
        delta = value - sum(devs)
        size = self.device_size or max(devs, default=0)
        order = sorted(range(len(devs)), key=devs.__getitem__, reverse=delta > 0)
        for j in order:
            if delta == 0:
                break
            if delta > 0:
                k = min(delta, max(0, size - devs[j]))
                devs[j] += k
                delta -= k
            else:
                k = min(devs[j], -delta)
                devs[j] -= k
                delta += k

    def copy(self) -> Pool:
        """The same nodes and free GPUs, nothing held, to mutate apart: what a forecast step
        starts from, for far less than indexing the nodes again. The node names, index and
        totals never change, so the copy shares them."""
        new = Pool.__new__(Pool)
        new.cluster = self.cluster
        new.state = self.state
        new.model = self.model
        new.group = self.group
        new.key = self.key
        new.names = self.names
        new.index = self.index
        new.total = self.total
        new.max_total = self.max_total
        new.total_gpus = self.total_gpus
        new.out_of_service = self.out_of_service
        new.free = self.free.copy()
        new.free_total = self.free_total
        new.held = [0] * len(self.free)
        new.buckets = [b.copy() for b in self.buckets]
        new.general = self.general
        new.device_size = self.device_size
        new.ids = self.ids
        new.dpolicy = self.dpolicy
        new.dev = None if self.dev is None else [d.copy() for d in self.dev]
        new.cores = None if self.cores is None else [c and c.copy() for c in self.cores]
        new.cpu = None if self.cpu is None else self.cpu.copy()
        new.mem = None if self.mem is None else self.mem.copy()
        return new

    def hold(self, node: int, gpus: int) -> None:
        """Withdraw ``gpus`` free GPUs of a node for a starving job (the starvation guard)."""
        self.take(node, gpus)
        self.held[node] += gpus

    def held_total(self) -> int:
        return sum(self.held)

    def fits_without_holds(self, gpus_per_replica: int, replicas: int) -> bool:
        """Whether the gang would fit if every hold on this pool were released."""
        slots = 0
        for f, h in zip(self.free, self.held, strict=True):
            slots += (f + h) // gpus_per_replica
            if slots >= replicas:
                return True
        return False

    # -- booked per device, CPU and memory (``general`` pools) ---------------------------------

    def slots_ask(self, i: int, ask: Ask) -> int:
        """How many replicas of ``ask`` node ``i`` takes now, each on devices of its own."""
        g, d, cores, cpu, mem = ask
        s = self.free[i] // g
        if not s:
            return 0
        if self.cpu is not None:
            c = self.cpu[i] // (cpu or 1)  # a pod always takes some CPU
            if c < s:
                s = c
        if self.mem is not None and mem:
            m = self.mem[i] // mem
            if m < s:
                s = m
        if s and self.dev is not None:
            per = -(-g // d)
            cr = self.cores[i] if cores else None  # type: ignore[index]
            counts = []
            for j, f in enumerate(self.dev[i]):
                n = f // per
                if cr is not None:
                    n = min(n, cr[j] // cores)
                if n:
                    counts.append(n)
            if d == 1:
                k = sum(counts)
            else:  # each replica on d distinct devices
                k = sum(counts) // d
                while k and sum(min(n, k) for n in counts) < k * d:
                    k -= 1
            if k < s:
                s = k
        return s

    def fits_ask(self, ask: Ask, r: int) -> bool:
        """Whether ``r`` replicas of ``ask`` fit, each on one node (and its devices)."""
        g = ask[0]
        buckets = self.buckets
        slots = 0
        for f in range(len(buckets) - 1, g - 1, -1):
            for i in buckets[f]:
                slots += self.slots_ask(i, ask)
                if slots >= r:
                    return True
        return False

    def could_ever_fit_ask(self, ask: Ask, r: int) -> bool:
        """Whether ``r`` replicas would fit were every node and device empty (CPU and memory
        are not known empty, so only units and devices count)."""
        g, d = ask[0], ask[1]
        if self.dev is None:
            return self.could_ever_fit(g, r)
        per = -(-g // d)
        size = self.device_size
        if per > size:
            return False
        slots = 0
        for i, devs in enumerate(self.dev):
            if len(devs) < d or self.total[i] < g:
                continue
            slots += min(self.total[i] // g, len(devs) * (size // per) // d)
            if slots >= r:
                return True
        return False

    def max_device_free(self) -> int:
        """The most units free on one device (on a node with room at all)."""
        if self.dev is None:
            return self.max_block()
        return max(
            (min(max(devs, default=0), f) for devs, f in zip(self.dev, self.free, strict=True)),
            default=0,
        )

    def _devices(self, i: int, ask: Ask, frag: Fragmentation | None) -> tuple[list[int], float]:
        """The devices one replica takes on node ``i`` (which must take it), and the growth
        of the node's fragmentation (0 without a demand). The node's own policy when its
        cluster's scheduler picks the device (binpack: the fullest that fits, spread: the
        emptiest, as HAMi and Volcano do); the portal's rule when the device is pinned."""
        g, d, cores = ask[0], ask[1], ask[2]
        if self.dev is None:
            return [], self._growth(i, ask, (), frag) if frag is not None else 0.0
        per = -(-g // d)
        devs = self.dev[i]
        cr = self.cores[i] if cores else None  # type: ignore[index]
        fit = [j for j in range(len(devs)) if devs[j] >= per and (cr is None or cr[j] >= cores)]
        policy = self.dpolicy[i]  # type: ignore[index]
        if policy == "spread":
            fit.sort(key=lambda j: (devs[j], j), reverse=True)
        else:
            fit.sort(key=lambda j: (devs[j], j))
        if frag is None:
            return fit[:d], 0.0
        if policy or d > 1:
            chosen = fit[:d]
            return chosen, self._growth(i, ask, chosen, frag)
        best: tuple[float, int] | None = None
        seen: set[int] = set()
        for j in fit:  # fullest first: among equal growths the fullest wins
            if devs[j] in seen:  # equal devices grow the fragmentation alike
                continue
            seen.add(devs[j])
            growth = self._growth(i, ask, (j,), frag)
            if best is None or growth < best[0]:
                best = (growth, j)
        assert best is not None
        return [best[1]], best[0]

    def _growth(self, i: int, ask: Ask, chosen: Iterable[int], frag: Fragmentation) -> float:
        """How much node ``i``'s expected fragmentation grows if it takes one replica."""
        cpu = UNBOUNDED if self.cpu is None else self.cpu[i]
        if self.dev is None:
            before = (self.free[i],)
            after = (self.free[i] - ask[0],)
        else:
            before = tuple(self.dev[i])
            per = -(-ask[0] // ask[1])
            left = list(before)
            for j in chosen:
                left[j] -= per
            after = tuple(left)
        cpu_after = cpu - ask[3] if cpu != UNBOUNDED else cpu
        return frag.of(self.model, cpu_after, after) - frag.of(self.model, cpu, before)

    def plan_ask(
        self, ask: Ask, r: int, frag: Fragmentation | None
    ) -> tuple[list[int], list[list[int]], int] | None:
        """Where ``r`` replicas of ``ask`` go, without mutating: (node per replica, devices
        per replica, units left free on the nodes used), or None when they do not fit.

        Without a demand (``frag`` None): best fit, the nodes with the fewest free units
        that take a replica first, as :meth:`plan`. With one: each replica where the
        expected fragmentation grows least (``scheduling.engine.placement``); ties to the
        node left with the fewest free units, then the least CPU, then name order.
        """
        if r > 1 and frag is not None:
            scratch = self.copy()
            nodes: list[int] = []
            devices: list[list[int]] = []
            for _ in range(r):
                one = scratch.plan_ask(ask, 1, frag)
                if one is None:
                    return None
                scratch.take_ask(one[0][0], ask, one[1][0])
                nodes.append(one[0][0])
                devices.append(one[1][0])
            used = set(nodes)
            return nodes, devices, sum(scratch.free[i] for i in used)
        g = ask[0]
        if frag is None:
            buckets = self.buckets
            remaining = r
            chosen: list[int] = []
            devs: list[list[int]] = []
            leftover = 0
            for f in range(g, len(buckets)):
                for i in reversed(buckets[f]):
                    k = self.slots_ask(i, ask)
                    if not k:
                        continue
                    k = min(k, remaining)
                    picks = self._picks(i, ask, k)
                    chosen.extend([i] * k)
                    devs.extend(picks)
                    leftover += f - k * g
                    remaining -= k
                    if remaining == 0:
                        return chosen, devs, leftover
            return None
        best: tuple[float, int, int, int] | None = None
        best_devs: list[int] = []
        free = self.free
        cpu = self.cpu
        for i in range(len(free)):
            if free[i] < g or not self.slots_ask(i, ask):
                continue
            picked, growth = self._devices(i, ask, frag)
            key = (growth, free[i] - g, UNBOUNDED if cpu is None else cpu[i] - ask[3], i)
            if best is None or key < best:
                best, best_devs = key, picked
        if best is None:
            return None
        return [best[3]], [best_devs], best[1]

    def _picks(self, i: int, ask: Ask, k: int) -> list[list[int]]:
        """The devices of ``k`` replicas on node ``i``, one after the other, by the node's
        device rule (the books are restored after)."""
        if self.dev is None:
            return [[] for _ in range(k)]
        if k == 1:
            return [self._devices(i, ask, None)[0]]
        saved = self.dev[i].copy()
        saved_cores = None if self.cores is None or self.cores[i] is None else self.cores[i].copy()
        per = -(-ask[0] // ask[1])
        out = []
        for _ in range(k):
            picked = self._devices(i, ask, None)[0]
            for j in picked:
                self.dev[i][j] -= per
                if ask[2] and saved_cores is not None:
                    self.cores[i][j] -= ask[2]  # type: ignore[index]
            out.append(picked)
        self.dev[i] = saved
        if saved_cores is not None:
            self.cores[i] = saved_cores  # type: ignore[index]
        return out

    def take_ask(self, i: int, ask: Ask, devices: Iterable[int]) -> None:
        """Charge one replica of ``ask`` on node ``i`` and the devices planned for it."""
        g, d, cores, cpu, mem = ask
        self._set_free(i, self.free[i] - g)
        if self.dev is not None:
            per = -(-g // d)
            cr = self.cores[i] if cores else None  # type: ignore[index]
            for j in devices:
                self.dev[i][j] -= per
                if cr is not None:
                    cr[j] -= cores
        if self.cpu is not None:
            self.cpu[i] -= cpu or 1
        if self.mem is not None:
            self.mem[i] -= mem

    def device_names(self, i: int, devices: Iterable[int]) -> str:
        """How an admission names one replica's devices: their UUIDs, else their indexes."""
        ids = self.ids[i] if self.ids is not None else ()
        return "+".join(ids[j] if ids else str(j) for j in devices)
