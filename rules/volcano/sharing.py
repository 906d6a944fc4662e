"""Shared (fractional) GPUs: a share per replica in the words of the cluster's sharing mode
(Volcano's deviceshare plugin or HAMi)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from rules.volcano.names import (
    INT32_MAX,
    _fail,
)

SHARING_VOLCANO_VGPU: Final = "volcano-vgpu"
SHARING_HAMI: Final = "hami"
HAMI_SCHEDULER: Final = "hami-scheduler"
"""HAMi's scheduler extender: its webhook points shared-GPU pods at it, and so does the builder."""
VGPU_NUMBER: Final = "volcano.sh/vgpu-number"
VGPU_MEMORY: Final = "volcano.sh/vgpu-memory"
VGPU_CORES: Final = "volcano.sh/vgpu-cores"
HAMI_GPU: Final = "nvidia.com/gpu"
HAMI_MEMORY: Final = "nvidia.com/gpumem"
HAMI_CORES: Final = "nvidia.com/gpucores"
HAMI_GPU_POLICY: Final = "hami.io/gpu-scheduler-policy"
VGPU_MODE: Final = "volcano.sh/vgpu-mode"
HAMI_USE_UUID: Final = "nvidia.com/use-gpuuuid"
"""The devices (UUIDs, comma-separated) HAMi's scheduler may give the pod, and no other."""
VGPU_USE_UUID: Final = "volcano.sh/vgpu-use-gpuuuid"
"""The same for Volcano's deviceshare plugin (``how_to_use_volcano_vgpu.md``)."""
_DEVICE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True, kw_only=True)
class GpuShare:
    """A fraction of one GPU per replica, in the words of the cluster's sharing mode.

    ``volcano-vgpu``: one ``volcano.sh/vgpu-number`` with ``vgpu-memory`` MiB (and
    ``vgpu-cores`` %), scheduled by Volcano's deviceshare plugin. ``hami``: one
    ``nvidia.com/gpu`` with ``nvidia.com/gpumem`` MiB (and ``gpucores`` %), scheduled by
    ``hami-scheduler``, packed onto the fullest device that fits (``binpack``) so whole devices
    stay free for larger shares.
    """

    mode: str
    memory_mib: int
    cores_percent: int | None = None

    def resources(self) -> dict[str, int]:
        vgpu = self.mode == SHARING_VOLCANO_VGPU
        amounts = {
            VGPU_NUMBER if vgpu else HAMI_GPU: 1,
            VGPU_MEMORY if vgpu else HAMI_MEMORY: self.memory_mib,
        }
        if self.cores_percent is not None:
            amounts[VGPU_CORES if vgpu else HAMI_CORES] = self.cores_percent
        return amounts

    def pod_annotations(self, devices: Sequence[str] = ()) -> dict[str, str]:
        """The pod's annotations; ``devices``: the UUIDs its replicas were planned on, which
        pins the pod to them (a task of several replicas may take any of its replicas')."""
        if self.mode == SHARING_VOLCANO_VGPU:
            out = {VGPU_MODE: "hami-core"}
        else:
            out = {HAMI_GPU_POLICY: "binpack"}
        if devices:
            out[VGPU_USE_UUID if self.mode == SHARING_VOLCANO_VGPU else HAMI_USE_UUID] = ",".join(
                sorted(set(devices))
            )
        return out


def _validate_share(share: GpuShare | None) -> None:
    if share is None:
        return
    if share.mode not in (SHARING_VOLCANO_VGPU, SHARING_HAMI):
        raise _fail("gpu_share", f"mode must be volcano-vgpu or hami, got {share.mode!r}")
    if not 1 <= share.memory_mib <= INT32_MAX:
        raise _fail("gpu_share", f"memory_mib must be a positive number, got {share.memory_mib}")
    if share.cores_percent is not None and not 1 <= share.cores_percent <= 100:
        raise _fail("gpu_share", f"cores_percent must be 1 to 100, got {share.cores_percent}")
