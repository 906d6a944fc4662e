"""The capacity unit of shared (fractional) GPUs, and the fair unit across capacity kinds.

Three kinds of capacity exist: whole GPUs, MIG slices and shared pools (Volcano vGPU or HAMi
splitting each device between several pods). The engine counts every pool in integers: devices
for a whole-GPU pool, slices for a MIG pool, and **GiB of GPU memory** for a shared pool. So a
shared pool of 4 nodes x 8 A100-80GB has 2,560 units, a replica asking for 20 GiB takes 20 of
them, and a team's quota on the pool is GiB too.

Usage (fair share) must compare a GiB of a shared pool with a whole GPU: both are cost-weighted
**GPU-equivalent hours**. A shared pool's ``cost_factor`` is per GiB-hour (its card's cost
divided by the card's memory), and a replica is charged the larger of what it asks of the
device's memory and of its compute (its dominant resource, in GiB-equivalents), so a replica
that asks 10 GiB but 100 % of the cores pays for the whole card, as it keeps others off it.
"""

from __future__ import annotations

import math


def charged_gib(memory_gib: int, cores_percent: int | None, device_memory_gib: float) -> float:
    """GiB-equivalents one replica is charged per hour: max(memory, cores% x device memory).

    ``cores_percent`` None means the replica did not cap its compute: it is charged for
    memory only (the device plugin lets it use idle compute, not reserved compute).
    """
    compute = 0.0
    if cores_percent is not None and device_memory_gib > 0:
        compute = device_memory_gib * max(0, min(100, cores_percent)) / 100.0
    return max(float(memory_gib), compute)


def gpu_equivalents(memory_gib: int, cores_percent: int | None, device_memory_gib: float) -> float:
    """The fraction of one card a replica holds (0 < x <= 1), for display and reports."""
    if device_memory_gib <= 0:
        return 0.0
    return min(1.0, charged_gib(memory_gib, cores_percent, device_memory_gib) / device_memory_gib)


def shared_cost_factor(card_cost_factor: float, card_memory_gib: float) -> float:
    """A shared pool's cost per GiB-hour, from its card's cost per GPU-hour: what makes one
    GiB-hour of a share worth the same as that fraction of a whole card's hour."""
    if card_memory_gib <= 0:
        return card_cost_factor
    return card_cost_factor / card_memory_gib


def memory_units(memory_mib: int) -> int:
    """GiB units for a quantity of device memory reported in MiB (rounded down: a pool never
    promises a GiB it does not have)."""
    return max(0, math.floor(memory_mib / 1024))
