"""In-cycle capacity: free GPUs of one model in one cluster, node by node.

Nodes are bucketed by their free GPU count so that a gang's fit is a walk over at most
``max GPUs per node`` buckets, not over nodes: the check costs the same on 20 nodes or 2,000.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduling.engine.snapshot import ClusterState, Node


class Pool:
    """Free GPUs of one GPU model in one cluster (and one ``Node.group`` of it); mutated as
    the cycle admits jobs.

    ``buckets[f]`` holds the indices of the nodes with exactly ``f`` usable free GPUs, as an
    insertion-ordered dict used as an ordered set (O(1) add, remove and "take one").
    """

    __slots__ = (
        "buckets",
        "cluster",
        "free",
        "free_total",
        "group",
        "held",
        "index",
        "key",
        "max_total",
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
        self._bucket()

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
        """Charge ``gpus`` on node index ``node`` (an admission or a reservation)."""
        self._set_free(node, self.free[node] - gpus)

    def reset_free(self, free: Mapping[int, int]) -> None:
        """Set the free GPUs of the nodes at these indexes (clamped to 0..total), ordering
        the buckets as a new pool would: which node a placement takes first depends on that
        order, and a forecast's carried pools must place as a pool made from the nodes."""
        for i, value in free.items():
            self.free[i] = max(0, min(value, self.total[i]))
        self._bucket()

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
