"""The one capacity rule: free GPUs per node and model, from the inventory and the node plans.

Free GPUs on a node row = allocatable − GPUs held by pods the portal did not create − GPUs the
portal's holding jobs put there (by their ``node_plan``, which follows the pods' real bindings
as soon as the cluster reports them). A node that is not Ready or is cordoned has nothing free;
what it would have is "out of service".

The scheduler's cycle, the cluster page and the dashboards all count through this module, so
the three can never disagree. It is plain Python on the ground floor (no Django, no I/O): the
callers read the rows their own way (the cycle from one pass over the holding jobs, the
dashboards in SQL) and hand over plain numbers.

An over-count is the books contradicting themselves: a node whose plans and foreign pods add
up to more than it can allocate. The cluster never runs more than a node allocates, so some of
those GPUs are in fact bound on *another* node of the same pool (Volcano chose differently
from the plan and the portal has not heard yet). Clamping that node's free GPUs at zero would
hide the error and leave the node that really holds them looking free: exactly how a job was
admitted into a full pool. Instead :func:`pool_free` takes the excess off the other nodes of
the pool (the most free first, so that no large block is promised on a guess), which keeps
the pool's total exact, and reports the over-count so that the caller logs it and asks for the
plans to be corrected from the cluster's bindings.

A pool's capacity (:func:`pool_capacity`) is its size, not what it can give now: the sum of
what its node rows allocate, every row counted whether or not it is in service (a cordoned or
NotReady node is still the pool's, and its GPUs come back with it; what can be used now is the
free rule's answer). The quota grid, the cluster page, the Volcano queues' capability and the
engine's share book all size a pool this way.

A shared node (a pool counted in GiB of GPU memory) is also booked per device
(:func:`device_books`): a share lives on one device, so the most free on one device, not the
node's sum, is what a share can get; each share is charged to the device its plan names.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "DeviceBooks",
    "NodeFree",
    "NodeLoad",
    "OverCount",
    "device_books",
    "node_free_gpus",
    "planned_gpus_by_node",
    "pool_capacity",
    "pool_free",
]

PlanKey = tuple[Hashable, str, Hashable]
"""(cluster, node name, GPU model): a node with MIG slices has one row per resource, each of
its own model, and a job is charged to the row of its model only."""


def planned_gpus_by_node(
    jobs: Iterable[tuple[Hashable, Sequence[str] | None, int, Hashable]],
) -> dict[PlanKey, int]:
    """GPUs the holding jobs put on each (cluster, node, model): ``jobs`` yields (cluster,
    node plan, GPUs per replica, model) per job, one plan entry per replica."""
    planned: dict[PlanKey, int] = defaultdict(int)
    for cluster, plan, gpus, model in jobs:
        for node in plan or ():
            if node:
                planned[(cluster, node, model)] += gpus
    return dict(planned)


def pool_capacity(allocatable: Iterable[int]) -> int:
    """A pool's capacity from its node rows' allocatable GPUs (GiB for a shared pool): their
    sum, every row counted, in service or not; a row reporting less than nothing counts 0 (as
    the engine's pools clamp it)."""
    return sum(a for a in allocatable if a > 0)


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """One node row's numbers, as the inventory and the plans give them."""

    name: str
    allocatable: int
    used_by_others: int
    planned: int
    ready: bool = True
    schedulable: bool = True

    @property
    def in_service(self) -> bool:
        return self.ready and self.schedulable


@dataclass(frozen=True, slots=True)
class NodeFree:
    """What the rule makes of one node row."""

    free: int
    """GPUs a new replica may be given here now (0 on a node out of service)."""
    out_of_service: int
    """GPUs nobody holds on a node that is not Ready or is cordoned."""
    over: int
    """Planned GPUs beyond what the node can still allocate: replicas the plans put here that
    must be running elsewhere (0 when the books are sound)."""

    @property
    def idle(self) -> int:
        """GPUs nobody holds, whether or not the node can take work."""
        return self.free + self.out_of_service


def node_free_gpus(node: NodeLoad) -> NodeFree:
    """The rule for one node row, on its own (no pool correction)."""
    left = node.allocatable - node.used_by_others - node.planned
    idle = max(0, left)
    # Only planned GPUs can be elsewhere: foreign pods beyond allocatable (a GPU failed under
    # them) are bound right here, and simply leave the node nothing.
    over = min(node.planned, max(0, -left))
    if node.in_service:
        return NodeFree(free=idle, out_of_service=0, over=over)
    return NodeFree(free=0, out_of_service=idle, over=over)


@dataclass(frozen=True, slots=True)
class OverCount:
    """A node whose books count more GPUs than it has, and where the excess was charged."""

    node: str
    allocatable: int
    used_by_others: int
    planned: int
    over: int
    charged_to: tuple[tuple[str, int], ...]
    """(node, GPUs) taken off other nodes of the pool for it; what could not be charged
    anywhere is simply absent (the pool has nothing free then)."""

    @property
    def message(self) -> str:
        where = ", ".join(f"{n} −{g}" for n, g in self.charged_to) or "no other node had any"
        return (
            f"node {self.node}: {self.planned} GPUs planned + {self.used_by_others} used by "
            f"others on {self.allocatable} allocatable ({self.over} too many); the excess runs "
            f"elsewhere in the pool and is taken off its free GPUs ({where})"
        )


def pool_free(nodes: Sequence[NodeLoad]) -> tuple[list[NodeFree], list[OverCount]]:
    """The rule for every node row of one pool (one GPU model on one cluster), in order.

    Each node as :func:`node_free_gpus` says; then each over-count is taken off the other
    nodes' free GPUs (in service first, the most free first, ties by position), so that the
    pool's free total is never more than allocatable − others − planned.
    """
    result = [node_free_gpus(n) for n in nodes]
    overs = [i for i, r in enumerate(result) if r.over]
    if not overs:
        return result, []
    free = [r.free for r in result]
    spare = [r.out_of_service for r in result]
    reports = []
    for i in overs:
        owed = result[i].over
        charged: list[tuple[str, int]] = []
        # Where the excess most likely runs: nodes in service, most free first; then the rest
        # (bound before the node was cordoned or went NotReady), most idle first.
        order = sorted(
            (j for j in range(len(nodes)) if j != i),
            key=lambda j: (not nodes[j].in_service, -(free[j] + spare[j]), j),
        )
        for j in order:
            if not owed:
                break
            take = min(owed, free[j] + spare[j])
            if not take:
                continue
            from_free = min(take, free[j])
            free[j] -= from_free
            spare[j] -= take - from_free
            owed -= take
            charged.append((nodes[j].name, take))
        n = nodes[i]
        reports.append(
            OverCount(
                node=n.name,
                allocatable=n.allocatable,
                used_by_others=n.used_by_others,
                planned=n.planned,
                over=result[i].over,
                charged_to=tuple(charged),
            )
        )
    corrected = [
        NodeFree(free=free[k], out_of_service=spare[k], over=result[k].over)
        for k in range(len(nodes))
    ]
    return corrected, reports


class DeviceBooks(NamedTuple):
    """A shared node's devices as the books hold them, in device order."""

    free: list[int]
    """GiB free on each device (never below 0)."""
    ids: tuple[str, ...]
    """Each device's UUID; empty when the inventory knows none."""
    cores: list[int]
    """Compute (% of the device) free on each; empty when the node registered none."""


def device_books(
    allocatable: int,
    device_gib: int,
    foreign: int,
    shares: Sequence[tuple[int, str] | tuple[int, str, int]],
    devices: list[dict[str, Any]] | None = None,
) -> DeviceBooks:
    """Free GiB (and compute) per device of a shared node, and the devices' UUIDs.

    ``shares``: (GiB, device, compute %) of each replica planned on the node, oldest first;
    the device as its plan names it ("" when unknown), the compute 0 when it caps none. When
    the inventory read the node's devices (``clusters.models.Node.devices``: each one's UUID,
    GiB, compute, and what foreign pods hold on it), those are the devices, and each share is
    charged to the device its plan names (planned by the cycle, then as the cluster's scheduler
    reported it). What is left unplaced (a share whose device is not known, foreign GiB the
    inventory could not pin to a device) is charged as the cluster's scheduler places it: to
    the fullest device that holds it (HAMi's and the Volcano vGPU plugin's ``binpack``).
    Without the inventory's devices, the node is ``allocatable / device size`` (rounded)
    devices of equal size, and compute is not booked. A share that no device holds any more
    (an over-count) is taken from the fullest devices, never below 0.
    """
    if allocatable <= 0:
        return DeviceBooks([], (), [])
    rows = [d for d in devices or () if int(d.get("gib") or 0) > 0]
    index: dict[str, int] = {}
    cores: list[int] = []
    if rows:
        free = [int(d["gib"]) for d in rows]
        ids = tuple(str(d.get("id") or "") for d in rows)
        index = {uuid: i for i, uuid in enumerate(ids) if uuid}
        if all("cores" in d for d in rows):
            cores = [int(d["cores"]) - int(d.get("others_cores") or 0) for d in rows]
        known_foreign = 0
        for i, d in enumerate(rows):
            others = min(free[i], max(0, int(d.get("others") or 0)))
            free[i] -= others
            known_foreign += others
        foreign = max(0, foreign - known_foreign)
        if not index:
            ids = ()
    else:
        count = max(1, round(allocatable / device_gib)) if device_gib > 0 else 1
        size, extra = divmod(allocatable, count)
        free = [size + (1 if i < extra else 0) for i in range(count)]
        ids = ()
    loose: list[tuple[int, int]] = []
    for gib, device, *rest in shares:
        if gib <= 0:
            continue
        compute = int(rest[0] or 0) if rest and cores else 0
        planned = [index.get(part) for part in device.split("+")] if device and index else []
        if planned and None not in planned:
            per = -(-gib // len(planned))
            for at in planned:
                assert at is not None
                free[at] -= per  # charged where it is, even past 0: the sum shows the over-count
                if compute:
                    cores[at] -= compute
            continue
        loose.append((gib, compute))
    for gib, compute in [*loose, (foreign, 0)]:
        if gib <= 0:
            continue
        fit = [i for i in range(len(free)) if free[i] >= gib]
        if fit:
            i = min(fit, key=lambda i: (free[i], i))
            free[i] -= gib
            if compute:
                cores[i] -= compute
            continue
        for i in sorted(range(len(free)), key=free.__getitem__):
            take = min(max(free[i], 0), gib)
            free[i] -= take
            gib -= take
            if not gib:
                break
    return DeviceBooks([f if f > 0 else 0 for f in free], ids, [c if c > 0 else 0 for c in cores])
