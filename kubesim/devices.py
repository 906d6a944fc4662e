"""Shared GPUs on a simulated node: Volcano vGPU or HAMi splitting each device between pods.

A real cluster does this in two parts: a device plugin registers each GPU's memory, compute and
split count (HAMi in the ``hami.io/node-nvidia-register`` annotation; the Volcano vGPU plugin
in allocatable ``volcano.sh/vgpu-number`` / ``vgpu-memory``), and a scheduler plugin (Volcano's
``deviceshare``, or the ``hami-scheduler`` extender) places each share on *one device* that has
the memory, the compute and a free split slot. The node-wide sum is not enough: 2 devices with
30 GiB free each cannot take a 40 GiB share, and such a pod stays Pending.

:class:`SharedDevices` keeps the per-device books of one node; the scheduler asks it whether a
pod's share fits and which devices it takes (``binpack``: the fullest device that fits, as
HAMi's default; ``spread``: the emptiest; a HAMi pod's ``hami.io/gpu-scheduler-policy`` wins),
among the devices the pod's annotations allow (:class:`DevicePick`: HAMi's
``nvidia.com/use-gpuuuid`` / ``nouse-gpuuuid``, Volcano vGPU's ``volcano.sh/vgpu-use-gpuuuid``
/ ``vgpu-nouse-gpuuuid``). Where a share landed is written on its pod as the real schedulers
do (:meth:`SharedDevices.allocation`: ``hami.io/vgpu-devices-allocated`` or
``volcano.sh/vgpu-ids-new``, ``uuid,NVIDIA,MiB,cores:;``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

VGPU_NUMBER = "volcano.sh/vgpu-number"
VGPU_MEMORY = "volcano.sh/vgpu-memory"
VGPU_CORES = "volcano.sh/vgpu-cores"
VGPU_MEMORY_PERCENT = "volcano.sh/vgpu-memory-percentage"
HAMI_GPU = "nvidia.com/gpu"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_CORES = "nvidia.com/gpucores"
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_REGISTER = "hami.io/node-nvidia-register"
VGPU_REGISTER = "volcano.sh/node-vgpu-register"
POLICY_ANNOTATION = "kubesim.gpupool.dev/device-policy"
HAMI_USE_UUID = "nvidia.com/use-gpuuuid"
HAMI_NOUSE_UUID = "nvidia.com/nouse-gpuuuid"
VGPU_USE_UUID = "volcano.sh/vgpu-use-gpuuuid"
VGPU_NOUSE_UUID = "volcano.sh/vgpu-nouse-gpuuuid"
HAMI_POLICY = "hami.io/gpu-scheduler-policy"
HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
HAMI_NODE = "hami.io/vgpu-node"
VGPU_ALLOCATED = "volcano.sh/vgpu-ids-new"
VGPU_NODE = "volcano.sh/vgpu-node"

DEVICE_ONLY = frozenset(
    {
        VGPU_CORES,
        VGPU_MEMORY_PERCENT,
        HAMI_MEMORY,
        HAMI_CORES,
        HAMI_MEMORY_PERCENT,
    }
)
"""Pod resources no node advertises: only the device-level check (below) counts them, as
HAMi's chart marks them ``ignoredByScheduler`` and Volcano's deviceshare plugin owns them."""

MODES = ("volcano-vgpu", "hami")
POLICIES = ("binpack", "spread")


def register_annotation(
    count: int, split: int, memory_mib: int, cores: int, kind: str, uuids: list[str] | None = None
) -> str:
    """A device plugin's registration, the older ``id,count,devmem,devcore,type,numa,health``
    records separated by colons (HAMi and the Volcano vGPU plugin both write this form);
    ``uuids``: each device's UUID (the node's own, as ``nvidia-smi -L`` lists them)."""
    ids = uuids or [f"GPU-kubesim-{i:04d}" for i in range(count)]
    return ":".join(
        f"{ids[i]},{split},{memory_mib},{cores},NVIDIA-{kind},0,true" for i in range(count)
    )


def parse_register(text: str) -> list[tuple[int, int, int, str]]:
    """(memory MiB, cores %, split count, UUID) per healthy device of a registration
    annotation (the colon form above, or HAMi's newer JSON list)."""
    text = (text or "").strip()
    out: list[tuple[int, int, int, str]] = []
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            return []
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("health", True) is not False:
                out.append(
                    (
                        int(item.get("devmem", 0)),
                        int(item.get("devcore", 100)),
                        int(item.get("count", 1)),
                        str(item.get("id") or ""),
                    )
                )
        return out
    for record in text.split(":"):
        parts = record.split(",")
        if len(parts) < 4 or (len(parts) >= 7 and parts[6].strip().lower() == "false"):
            continue
        try:
            out.append((int(parts[2]), int(parts[3]), int(parts[1]), parts[0].strip()))
        except ValueError:
            continue
    return out


def _uuids(text: Any) -> frozenset[str]:
    return frozenset(u.strip() for u in str(text or "").split(",") if u.strip())


@dataclass(frozen=True)
class DevicePick:
    """What a pod's annotations say about its devices: the UUIDs it may use (or not) in each
    sharing mode, and HAMi's per-pod device policy (``binpack``/``spread``; "" = the node's)."""

    hami_use: frozenset[str] = frozenset()
    hami_nouse: frozenset[str] = frozenset()
    vgpu_use: frozenset[str] = frozenset()
    vgpu_nouse: frozenset[str] = frozenset()
    policy: str = ""

    @classmethod
    def from_annotations(cls, annotations: dict[str, Any] | None) -> DevicePick:
        a = annotations or {}
        policy = str(a.get(HAMI_POLICY) or "")
        return cls(
            hami_use=_uuids(a.get(HAMI_USE_UUID)),
            hami_nouse=_uuids(a.get(HAMI_NOUSE_UUID)),
            vgpu_use=_uuids(a.get(VGPU_USE_UUID)),
            vgpu_nouse=_uuids(a.get(VGPU_NOUSE_UUID)),
            policy=policy if policy in POLICIES else "",
        )

    @property
    def key(self) -> str:
        """A stable text for cache keys ("" for a pod that says nothing)."""
        if self == NO_PICK:
            return ""
        return json.dumps(
            [sorted(self.hami_use), sorted(self.hami_nouse), sorted(self.vgpu_use),
             sorted(self.vgpu_nouse), self.policy]
        )  # fmt: skip


NO_PICK = DevicePick()


@dataclass
class Share:
    """What one pod asks of the devices: ``count`` devices, each with this memory and compute."""

    count: int
    memory_mib: int
    cores: int


@dataclass
class SharedDevices:
    """Free memory, compute and split slots per device of one node, and who holds what."""

    mode: str
    policy: str
    memory: list[int]
    cores: list[int]
    slots: list[int]
    size: list[int]
    uuids: list[str] = field(default_factory=list)
    held: dict[tuple[str, str], list[tuple[int, int, int]]] = field(default_factory=dict)

    @classmethod
    def from_node(cls, node: dict[str, Any]) -> SharedDevices | None:
        """The node's devices when it shares them (a registration annotation), else None."""
        meta = node.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        mode = ""
        if HAMI_REGISTER in annotations:
            mode, text = "hami", annotations[HAMI_REGISTER]
        elif VGPU_REGISTER in annotations:
            mode, text = "volcano-vgpu", annotations[VGPU_REGISTER]
        if not mode:
            return None
        devices = parse_register(text)
        policy = annotations.get(POLICY_ANNOTATION, "binpack")
        return cls(
            mode=mode,
            policy=policy if policy in POLICIES else "binpack",
            memory=[d[0] for d in devices],
            cores=[d[1] for d in devices],
            slots=[d[2] for d in devices],
            size=[d[0] for d in devices],
            uuids=[d[3] or f"GPU-{i}" for i, d in enumerate(devices)],
        )

    def same_layout(self, other: SharedDevices) -> bool:
        return self.mode == other.mode and self.size == other.size and self.uuids == other.uuids

    def _allowed(self, pick: DevicePick) -> list[int]:
        """The devices the pod's annotations let it use on this node (every one by default)."""
        vgpu = self.mode == "volcano-vgpu"
        use = pick.vgpu_use if vgpu else pick.hami_use
        nouse = pick.vgpu_nouse if vgpu else pick.hami_nouse
        return [
            i for i, uuid in enumerate(self.uuids) if (not use or uuid in use) and uuid not in nouse
        ]

    def share_of(self, req: dict[str, int]) -> Share | None:
        """The share a pod's requests (milli-units) ask for on this node, or None when it asks
        for none (a CPU pod)."""
        vgpu = self.mode == "volcano-vgpu"
        count = req.get(VGPU_NUMBER if vgpu else HAMI_GPU, 0) // 1000
        if count <= 0:
            return None
        memory = req.get(VGPU_MEMORY if vgpu else HAMI_MEMORY, 0) // 1000
        percent = req.get(VGPU_MEMORY_PERCENT if vgpu else HAMI_MEMORY_PERCENT, 0) // 1000
        if not memory:
            # No memory asked: a percentage of the device, or all of it.
            memory = -(percent or 100)
        cores = req.get(VGPU_CORES if vgpu else HAMI_CORES, 0) // 1000
        return Share(count=count, memory_mib=memory, cores=cores)

    def _need(self, i: int, share: Share) -> int:
        if share.memory_mib < 0:  # a percentage of this device
            return self.size[i] * -share.memory_mib // 100
        return share.memory_mib

    def _choose(self, share: Share, pick: DevicePick = NO_PICK) -> list[int] | None:
        """The devices the share takes: among those the pod may use that have the memory, the
        compute and a split slot, the fullest first (``binpack``) or the emptiest (``spread``:
        the node's policy, or for HAMi the pod's own ``hami.io/gpu-scheduler-policy``)."""
        fit = [
            i
            for i in self._allowed(pick)
            if self.slots[i] > 0
            and self.memory[i] >= self._need(i, share)
            and self.cores[i] >= share.cores
        ]
        if len(fit) < share.count:
            return None
        policy = (pick.policy if self.mode == "hami" else "") or self.policy
        fit.sort(key=lambda i: (self.memory[i], i), reverse=policy == "spread")
        return fit[: share.count]

    def fits(self, req: dict[str, int], pick: DevicePick = NO_PICK) -> bool:
        share = self.share_of(req)
        return share is None or self._choose(share, pick) is not None

    def why(self, req: dict[str, int], pick: DevicePick = NO_PICK) -> list[str]:
        """Why the share fits no device, in the words HAMi's filter uses for a node."""
        share = self.share_of(req)
        if share is None or self._choose(share, pick) is not None:
            return []
        n = self._allowed(pick)
        if not n:
            return ["CardUuidMismatch"]
        if len(self.size) < share.count:
            return ["AllocatedCardsInsufficientRequest"]
        if not any(self.size[i] >= self._need(i, share) for i in n):
            return ["CardInsufficientMemory"]
        if not any(self.slots[i] > 0 for i in n):
            return ["CardTimeSlicingExhausted"]
        if not any(self.memory[i] >= self._need(i, share) for i in n):
            return ["CardInsufficientMemory"]
        return ["CardInsufficientCore"]

    def take(self, key: tuple[str, str], req: dict[str, int], pick: DevicePick = NO_PICK) -> None:
        """Charge the pod's share to the devices chosen for it (no-op for a pod without one)."""
        share = self.share_of(req)
        if share is None:
            return
        chosen = self._choose(share, pick)
        if chosen is None:
            return
        taken = []
        for i in chosen:
            memory = self._need(i, share)
            self.memory[i] -= memory
            self.cores[i] -= share.cores
            self.slots[i] -= 1
            taken.append((i, memory, share.cores))
        self.held[key] = taken

    def give_back(self, key: tuple[str, str]) -> None:
        for i, memory, cores in self.held.pop(key, []):
            self.memory[i] += memory
            self.cores[i] += cores
            self.slots[i] += 1

    def allocation(self, key: tuple[str, str], node: str) -> dict[str, str]:
        """The annotations the scheduler writes on a pod whose share it placed: the devices
        (``uuid,NVIDIA,memoryMiB,cores:`` each, ``;`` after the container, HAMi's protocol)
        and the node; empty for a pod that holds no share here."""
        taken = self.held.get(key)
        if not taken:
            return {}
        text = "".join(f"{self.uuids[i]},NVIDIA,{memory},{cores}:" for i, memory, cores in taken)
        if self.mode == "volcano-vgpu":
            return {VGPU_ALLOCATED: text + ";", VGPU_NODE: node}
        return {HAMI_ALLOCATED: text + ";", HAMI_NODE: node}

    def in_use(self) -> tuple[int, int]:
        """(memory MiB, cores %) held on the node, for the dashboards' readers and tests."""
        return sum(self.size) - sum(self.memory), sum(
            cores for taken in self.held.values() for _, _, cores in taken
        )
