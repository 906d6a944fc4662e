"""In-cycle capacity: free GPUs of one model in one cluster, node by node.

Nodes are bucketed by their free GPU count so that a gang's fit is a walk over at most
``max GPUs per node`` buckets, not over nodes: the check costs the same on 20 nodes or 2,000.

A pool whose nodes report more than a GPU count (a shared pool's free units per device, or
any node's free CPU and memory) is *booked per device*: ``general`` is set, and the ``*_ask``
methods check a replica against one node's devices, CPU and memory, and place it by the rule
of ``rules.engine.placement``. A pool whose nodes report only counts takes the bucket
walk above, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import compress
from operator import attrgetter, is_, is_not

from rules.engine.placement import UNBOUNDED, Fragmentation
from rules.engine.snapshot import ClusterState, Node

_by_name = attrgetter("name")
_total_gpus = attrgetter("total_gpus")
_free_gpus = attrgetter("free_gpus")
_out_of_service = attrgetter("out_of_service_gpus")
_devices = attrgetter("devices")
_device_ids = attrgetter("device_ids")
_device_cores = attrgetter("device_cores")
_device_policy = attrgetter("device_policy")
_cpu_free = attrgetter("cpu_free")
_memory_free = attrgetter("memory_free")

NEAR = 10
"""Growths of the expected fragmentation within 1/NEAR of a device count as equal."""


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
        "_buckets",
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
        ordered = sorted(nodes, key=_by_name)
        self.cluster = cluster
        self.state = state
        self.model = model
        self.group = group
        self.key = (cluster, model, group)
        """A pool's identity: one cluster's nodes of one model under one ``Node.group``."""
        self.names = list(map(_by_name, ordered))
        self.index = dict(zip(self.names, range(len(self.names)), strict=True))
        # Clamped with comparisons, not max/min calls: a pool is built every cycle (and, in
        # the trace bench, every decision) for every node.
        self.total = [t if t > 0 else 0 for t in map(_total_gpus, ordered)]
        self.free = [
            f if 0 <= f <= t else (0 if f < 0 else t)
            for f, t in zip(map(_free_gpus, ordered), self.total, strict=True)
        ]
        self.held = [0] * len(ordered)
        self.max_total = max(self.total, default=0)
        self.total_gpus = sum(self.total)
        self.out_of_service = sum(o for o in map(_out_of_service, ordered) if o > 0)
        self._books(ordered, shared, device_size)
        self._bucket()

    def _books(self, ordered: list[Node], shared: bool, device_size: int) -> None:
        """The per-device, CPU and memory books, when any node reports them. A node's
        devices are a tuple, replaced (not mutated) when a replica takes some, so copies
        share them and a node's state is a ready key for the placement memos."""
        self.dev: list[tuple[int, ...]] | None = None
        self.cores: list[list[int] | None] | None = None
        self.ids: list[tuple[str, ...]] | None = None
        self.dpolicy: list[str] | None = None
        self.cpu: list[int] | None = None
        self.mem: list[int] | None = None
        self.device_size = device_size
        with_devices = shared and any(map(_devices, ordered))
        with_cpu = any(c is not None for c in map(_cpu_free, ordered))
        with_mem = any(m is not None for m in map(_memory_free, ordered))
        self.general = with_devices or with_cpu or with_mem
        if with_devices:
            free = self.free
            # (A device reported with less than nothing free never fits and takes its
            # shortfall off the node's sum: no clamp per device on this per-node path.)
            dev: list[tuple[int, ...]] = list(map(_devices, ordered))
            if all(dev):  # every node reports its devices: the sums in C-level loops
                self.free = free = [
                    f if f <= t else (t if t > 0 else 0)
                    for f, t in zip(free, map(sum, dev), strict=True)
                ]
            else:
                for i, d in enumerate(dev):
                    if not d:  # a node that reports no devices: one device, node-wide books
                        dev[i] = d = (free[i],)
                    total = sum(d)
                    if total < free[i]:
                        free[i] = total if total > 0 else 0
            self.dev = dev
            if any(map(_device_cores, ordered)):
                self.cores = [
                    list(n.device_cores) if len(n.device_cores) == len(n.devices) else None
                    for n in ordered
                ]
            if any(map(_device_ids, ordered)):
                self.ids = [
                    ids if len(ids) == len(d) else ()
                    for ids, d in zip(
                        map(_device_ids, ordered), map(_devices, ordered), strict=True
                    )
                ]
            policies = list(map(_device_policy, ordered))
            self.dpolicy = policies if any(policies) else None
            if not device_size:
                self.device_size = max((max(d) for d in dev), default=0)
        if with_cpu:
            self.cpu = [
                UNBOUNDED if c is None else (c if c > 0 else 0) for c in map(_cpu_free, ordered)
            ]
        if with_mem:
            self.mem = [
                UNBOUNDED if m is None else (m if m > 0 else 0) for m in map(_memory_free, ordered)
            ]

    def _renode(self, old: Node, new: Node) -> bool:
        """Take ``new``'s free room in place of ``old``'s, on a pool booked per device whose
        device size was given; False (the pool half-changed: drop it) when anything else
        about the node differs and the pool must be built afresh."""
        if (
            new.name != old.name
            or new.total_gpus != old.total_gpus
            or new.out_of_service_gpus != old.out_of_service_gpus
            or new.device_ids != old.device_ids
            or new.device_policy != old.device_policy
            or new.device_cores
            or old.device_cores
            or not new.devices
            or len(new.devices) != len(old.devices)
            or (new.cpu_free is None) != (old.cpu_free is None)
            or (new.memory_free is None) != (old.memory_free is None)
        ):
            return False
        i = self.index[new.name]
        t = self.total[i]
        f = new.free_gpus
        f = f if 0 <= f <= t else (0 if f < 0 else t)
        d = new.devices
        s = sum(d)
        self.free[i] = f if f <= s else (s if s > 0 else 0)
        self.dev[i] = d  # type: ignore[index]
        if self.cpu is not None:
            c = new.cpu_free
            self.cpu[i] = UNBOUNDED if c is None else (c if c > 0 else 0)
        if self.mem is not None:
            m = new.memory_free
            self.mem[i] = UNBOUNDED if m is None else (m if m > 0 else 0)
        return True

    def _bucket(self) -> None:
        self.free_total = sum(self.free)
        self._buckets: list[dict[int, None]] | None = None
        if not self.general:
            self._build_buckets()

    def _build_buckets(self) -> list[dict[int, None]]:
        buckets: list[dict[int, None]] = [{} for _ in range(self.max_total + 1)]
        # Reversed so that "take the last one" yields the lowest node name first.
        for i in reversed(range(len(self.free))):
            buckets[self.free[i]][i] = None
        self._buckets = buckets
        return buckets

    @property
    def buckets(self) -> list[dict[int, None]]:
        """Node indexes by free GPUs. A pool booked per device builds them only when asked
        (a reclaim's what-if): its units may be thousandths of a device, thousands of
        buckets, and its own checks walk the nodes."""
        buckets = self._buckets
        return buckets if buckets is not None else self._build_buckets()

    # -- reading -----------------------------------------------------------------------------

    def max_block(self) -> int:
        """The largest number of free GPUs on one node."""
        if self._buckets is None:
            return max(self.free, default=0)
        buckets = self.buckets
        for f in range(len(buckets) - 1, 0, -1):
            if buckets[f]:
                return f
        return 0

    def fits(self, gpus_per_replica: int, replicas: int) -> bool:
        """Whether ``replicas`` replicas of ``gpus_per_replica`` fit, each on one node."""
        if self._buckets is None:
            slots = 0
            for f in self.free:
                slots += f // gpus_per_replica
                if slots >= replicas:
                    return True
            return False
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
        buckets = self._buckets
        if buckets is not None:
            del buckets[free[node]][node]
            buckets[value][node] = None
        self.free_total += value - free[node]
        free[node] = value

    def take(self, node: int, gpus: int) -> None:
        """Charge ``gpus`` on node index ``node`` (an admission or a reservation). On a pool
        booked per device the units come off the fullest devices first (what a reservation
        or a hold withdraws; an admission names its devices with :meth:`take_ask`)."""
        self._set_free(node, self.free[node] - gpus)
        if self.dev is not None:
            devs = list(self.dev[node])
            left = gpus
            for j in sorted(range(len(devs)), key=devs.__getitem__):
                if left <= 0:
                    break
                k = min(devs[j], left)
                devs[j] -= k
                left -= k
            self.dev[node] = tuple(devs)

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
        devs = list(self.dev[i])  # type: ignore[index]
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
        self.dev[i] = tuple(devs)  # type: ignore[index]

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
        new._buckets = None if self._buckets is None else [b.copy() for b in self._buckets]
        new.general = self.general
        new.device_size = self.device_size
        new.ids = self.ids
        new.dpolicy = self.dpolicy
        new.dev = None if self.dev is None else self.dev.copy()
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
            cr = self._cores(i, cores)
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

    def _cores(self, i: int, cores: int) -> list[int] | None:
        """Node ``i``'s compute left per device, when the ask reserves compute and the node
        books it."""
        if not cores or self.cores is None:
            return None
        return self.cores[i]

    def fits_ask(self, ask: Ask, r: int) -> bool:
        """Whether ``r`` replicas of ``ask`` fit, each on one node (and its devices)."""
        g = ask[0]
        if r == 1 and self.dev is not None and ask[1] == 1 and not ask[2]:
            # One replica on one device (the common share): C-level checks per node, as a
            # failing share scans every node (twice: now and at the cycle's start).
            per = g
            cpu_need = ask[3] or 1
            mem_need = ask[4]
            cpu = self.cpu
            mem = self.mem
            dev = self.dev
            for i, f in enumerate(self.free):
                if (
                    f >= g
                    and (cpu is None or cpu[i] >= cpu_need)
                    and (mem is None or mem[i] >= mem_need)
                    and max(dev[i]) >= per
                ):
                    return True
            return False
        slots = 0
        for i, f in enumerate(self.free):
            if f >= g:
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
            (min(max(devs), f) for devs, f in zip(self.dev, self.free, strict=True) if devs),
            default=0,
        )

    def _by_policy(self, i: int, ask: Ask) -> list[int]:
        """The devices of node ``i`` that hold one replica, in the order the node's device
        policy takes them: ``spread`` the emptiest first, else the fullest (``binpack``, as
        HAMi's default, and best fit where the portal picks)."""
        g, d, cores = ask[0], ask[1], ask[2]
        per = -(-g // d)
        devs = self.dev[i]  # type: ignore[index]
        cr = self._cores(i, cores)
        fit = [j for j in range(len(devs)) if devs[j] >= per and (cr is None or cr[j] >= cores)]
        if self.dpolicy is not None and self.dpolicy[i] == "spread":
            fit.sort(key=lambda j: (devs[j], j), reverse=True)
        else:
            fit.sort(key=lambda j: (devs[j], j))
        return fit

    def _choice(
        self, i: int, ask: Ask, frag: Fragmentation | None
    ) -> tuple[float, tuple[int, ...]] | None:
        """The devices one replica takes on node ``i`` and the growth of the node's expected
        fragmentation (0 without a demand); None when the node cannot take it. Where the
        cluster's scheduler picks the device (a ``device_policy``), the one it will pick;
        where the portal pins it, the one whose fragmentation grows least (fullest first)."""
        g, d, cores, cpu_ask, mem_ask = ask
        if self.free[i] < g:
            return None
        cpu = UNBOUNDED if self.cpu is None else self.cpu[i]
        if cpu < (cpu_ask or 1) or (self.mem is not None and self.mem[i] < mem_ask):
            return None
        cpu_after = cpu - cpu_ask if cpu != UNBOUNDED else cpu
        mem = UNBOUNDED if self.mem is None else self.mem[i]
        mem_after = mem - mem_ask if mem != UNBOUNDED else mem
        model = self.model
        if self.dev is None:
            if frag is None:
                return 0.0, ()
            before = (self.free[i],)
            after = (self.free[i] - g,)
            return frag.grow(model, cpu, before, cpu_after, after, mem, mem_after), ()
        if frag is not None and not cores and (self.dpolicy is None or not self.dpolicy[i]):
            return frag.best_devices(
                model, cpu, cpu_after, self.dev[i], -(-g // d), d, mem, mem_after
            )
        fit = self._by_policy(i, ask)
        if len(fit) < d:
            return None
        chosen = tuple(fit[:d])
        if frag is None:
            return 0.0, chosen
        devs = self.dev[i]
        per = -(-g // d)
        devs_after = tuple(v - per if j in chosen else v for j, v in enumerate(devs))
        return frag.grow(model, cpu, devs, cpu_after, devs_after, mem, mem_after), chosen

    def plan_ask(
        self, ask: Ask, r: int, frag: Fragmentation | None
    ) -> tuple[list[int], list[tuple[int, ...]], int, float] | None:
        """Where ``r`` replicas of ``ask`` go, without mutating: (node per replica, devices
        per replica, units left free on the nodes used, growth of the expected
        fragmentation), or None when they do not fit.

        Without a demand (``frag`` None): best fit, the nodes with the fewest free units
        that take a replica first, as :meth:`plan`. With one: each replica where the
        expected fragmentation grows least (``rules.engine.placement``); ties to the
        node left with the fewest free units, then the least CPU, then name order.
        """
        g = ask[0]
        free = self.free
        if frag is None or r > 1:
            scratch = self.copy() if r > 1 else self
            nodes: list[int] = []
            devices: list[tuple[int, ...]] = []
            grown = 0.0
            order = (
                sorted((i for i in range(len(free)) if free[i] >= g), key=free.__getitem__)
                if frag is None
                else None
            )
            for _ in range(r):
                one = scratch._best(ask, frag, order)
                if one is None:
                    return None
                grown += one[0]
                i, chosen = one[1], one[2]
                nodes.append(i)
                devices.append(chosen)
                if r > 1:
                    scratch.take_ask(i, ask, chosen)
            used = set(nodes)
            left = sum(scratch.free[i] for i in used) if r > 1 else free[nodes[0]] - g
            return nodes, devices, left, grown
        one = self._best(ask, frag, None)
        if one is None:
            return None
        return [one[1]], [one[2]], free[one[1]] - g, one[0]

    def _best(
        self, ask: Ask, frag: Fragmentation | None, order: list[int] | None
    ) -> tuple[float, int, tuple[int, ...]] | None:
        """The best node for one replica: (growth, node, devices). ``order``: best fit's
        order of the nodes (the first that takes it wins); None: score every node.

        Within the pool growths within 1/``NEAR`` of a device are equal and best fit
        decides; the growth returned is the chosen node's exact one, which is what
        candidate models are compared by (``Placement._best_of_ties``): between models the
        measure says how scarce each is for the work constrained to it, and rounding it
        would hand that scarce room to unconstrained jobs on best fit's small nodes."""
        free = self.free
        g = ask[0]
        if order is not None:
            for i in order:
                if free[i] < g:
                    continue
                choice = self._choice(i, ask, None)
                if choice is not None and (self.dev is None or self.slots_ask(i, ask)):
                    return 0.0, i, choice[1]
            return None
        cpu = self.cpu
        best: tuple[float, int, int, int] | None = None
        best_devs: tuple[int, ...] = ()
        exact = 0.0
        choose = self._choice
        # Growths within a tenth of a device of each other count as equal: the measure is
        # an expectation over a guessed mix, and best fit decides between near-equals.
        step = self.device_size / NEAR if self.dev is not None and self.device_size else 1 / NEAR
        dev = self.dev
        if frag is not None and dev is not None and not ask[2] and self.dpolicy is None:
            # The portal pins the device on every node: the loop below, inlined (it runs
            # over every node for every replica placed with a demand).
            d, cpu_ask, mem_ask = ask[1], ask[3], ask[4]
            per = -(-g // d)
            cpu_need = cpu_ask or 1
            mem = self.mem
            model = self.model
            best_devices = frag.best_devices
            for i, f in enumerate(free):
                if f < g:
                    continue
                c = UNBOUNDED if cpu is None else cpu[i]
                if c < cpu_need or (mem is not None and mem[i] < mem_ask):
                    continue
                after = c - cpu_ask if c != UNBOUNDED else c
                if mem is None:
                    res = best_devices(model, c, after, dev[i], per, d)
                else:
                    m = mem[i]
                    res = best_devices(
                        model, c, after, dev[i], per, d, m, m - mem_ask if m != UNBOUNDED else m
                    )
                if res is None:
                    continue
                key = (round(res[0] / step), f - g, after, i)
                if best is None or key < best:
                    best, best_devs, exact = key, res[1], res[0]
            if best is None:
                return None
            return exact, best[3], best_devs
        for i in range(len(free)):
            if free[i] < g:
                continue
            choice = choose(i, ask, frag)
            if choice is None:
                continue
            key = (
                round(choice[0] / step),
                free[i] - g,
                UNBOUNDED if cpu is None else cpu[i] - ask[3],
                i,
            )
            if best is None or key < best:
                best, best_devs, exact = key, choice[1], choice[0]
        if best is None:
            return None
        return exact, best[3], best_devs

    def take_ask(self, i: int, ask: Ask, devices: Iterable[int]) -> None:
        """Charge one replica of ``ask`` on node ``i`` and the devices planned for it."""
        g, d, cores, cpu, mem = ask
        self._set_free(i, self.free[i] - g)
        if self.dev is not None:
            per = -(-g // d)
            chosen = set(devices)
            self.dev[i] = tuple(v - per if j in chosen else v for j, v in enumerate(self.dev[i]))
            cr = self._cores(i, cores)
            if cr is not None:
                for j in chosen:
                    cr[j] -= cores
        if self.cpu is not None:
            self.cpu[i] -= cpu or 1
        if self.mem is not None:
            self.mem[i] -= mem

    def charge_host(self, i: int, cpu: int, mem: int) -> None:
        """Take ``cpu`` and ``mem`` off node ``i``'s books: a replica on another row of the
        same node (another MIG profile's pool) asked them."""
        if self.cpu is not None:
            self.cpu[i] -= cpu
        if self.mem is not None:
            self.mem[i] -= mem

    def device_names(self, i: int, devices: Iterable[int]) -> str:
        """How an admission names one replica's devices: their UUIDs, else their indexes."""
        ids = self.ids[i] if self.ids is not None else ()
        return "+".join(ids[j] if ids else str(j) for j in devices)


_POOLS: dict[tuple[object, ...], tuple[tuple[Node, ...], Pool]] = {}
_PATCHED_AT_MOST = 8


def pool_of(
    cluster: str,
    state: ClusterState,
    model: str,
    nodes: Sequence[Node],
    group: str = "",
    shared: bool = False,
    device_size: int = 0,
) -> Pool:
    """``Pool(...)`` of these nodes, built from the last pool of the same cluster, model and
    group when its nodes are the very same objects (a copy), or differ only in the free room
    of a few nodes of a pool booked per device (a copy with those nodes' books replaced).

    The trace bench decides once per task over a snapshot that changes one node at a time;
    the cycle's snapshots are new objects every time, which costs one identity check (and,
    for a pool booked per device, one copy kept)."""
    key = (cluster, state, model, group, shared, device_size)
    hit = _POOLS.get(key)
    if hit is not None and len(hit[0]) == len(nodes):
        old, base = hit
        if all(map(is_, old, nodes)):
            return base.copy()
        if base.general and base.dev is not None and device_size:
            changed = list(compress(range(len(nodes)), map(is_not, old, nodes)))
            if len(changed) <= _PATCHED_AT_MOST:
                pool = base.copy()
                if all(pool._renode(old[i], nodes[i]) for i in changed):
                    pool._bucket()
                    _POOLS[key] = (tuple(nodes), pool.copy())
                    return pool
    pool = Pool(cluster, state, model, nodes, group, shared, device_size)
    if pool.general and pool.dev is not None and device_size:
        # Kept only where a later snapshot may patch it: the cycle's whole-GPU pools are
        # new objects every cycle and would only pay for the copy.
        if len(_POOLS) >= 64:
            _POOLS.clear()
        _POOLS[key] = (tuple(nodes), pool.copy())
    return pool


def host_rows(pools: Iterable[Pool]) -> dict[tuple[str, str], list[tuple[Pool, int]]]:
    """(cluster, node) -> (pool, index) of every row of a node that has rows in several
    pools booking CPU or memory (one per MIG profile); empty when no node has."""
    rows: dict[tuple[str, str], list[tuple[Pool, int]]] = {}
    for pool in pools:
        if pool.cpu is None and pool.mem is None:
            continue
        for i, name in enumerate(pool.names):
            rows.setdefault((pool.cluster, name), []).append((pool, i))
    return {key: found for key, found in rows.items() if len(found) > 1}
