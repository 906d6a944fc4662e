"""What ``nvidia-smi`` prints inside a simulated container: the GPUs the pod was given.

The device plugin hands a container whole GPUs (``nvidia.com/gpu``) or MIG devices
(``nvidia.com/mig-<profile>``, the GPU Operator's *mixed* strategy) and the container sees only
those. kubesim numbers each node's devices the way the operator lays them out: the whole cards
first (GPU 0..n-1, what allocatable ``nvidia.com/gpu`` counts), then the MIG-partitioned cards,
each cut into slices of one profile. The kubelet gives each bound pod the lowest free device
numbers of each resource; this module turns them into ``nvidia-smi -L`` and ``nvidia-smi``
output, with UUIDs derived from the node and device number (stable across restarts).

Pure functions over a Node object and the device numbers: no store, no clock.
"""

from __future__ import annotations

import hashlib
import shlex
import time
from typing import Any

from kubesim.quantity import resource_list_to_milli

WHOLE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"

# The name nvidia-smi prints, where GPU Feature Discovery's label (spaces as dashes) is ambiguous.
_NAMES = {
    "NVIDIA-H100-80GB-HBM3": "NVIDIA H100 80GB HBM3",
    "NVIDIA-H100-PCIe": "NVIDIA H100 PCIe",
    "NVIDIA-A100-80GB-PCIe": "NVIDIA A100 80GB PCIe",
    "NVIDIA-GeForce-RTX-4090": "NVIDIA GeForce RTX 4090",
}


def gpu_name(product_label: str) -> str:
    """``NVIDIA-A100-SXM4-80GB`` (the node label) -> ``NVIDIA A100-SXM4-80GB``."""
    return _NAMES.get(product_label) or product_label.replace("-", " ", 1)


def _uuid(*parts: object) -> str:
    text = hashlib.sha1("/".join(str(p) for p in parts).encode()).hexdigest()  # noqa: S324 - ids
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"


def gpu_uuid(node: str, index: int) -> str:
    """A GPU's UUID (``GPU-xxxxxxxx-...``), stable for the node and device number."""
    return "GPU-" + _uuid(node, "gpu", index)


def mig_uuid(node: str, parent: int, profile: str, slot: int) -> str:
    """A MIG device's UUID (``MIG-xxxxxxxx-...``)."""
    return "MIG-" + _uuid(node, "mig", parent, profile, slot)


def slices_per_gpu(profile: str) -> int:
    """How many slices of a profile one card holds (``1g.10gb``: 7, ``3g.40gb``: 2...)."""
    try:
        compute = int(profile.split("g", 1)[0])
    except ValueError:
        return 1
    return {1: 7, 2: 3, 3: 2}.get(compute, 1)


def is_gpu_resource(name: str) -> bool:
    """Whole GPUs or MIG devices the NVIDIA device plugin hands out."""
    return name == WHOLE or name.startswith(MIG_PREFIX)


def device_count(node: dict[str, Any], resource: str) -> int:
    """How many devices of ``resource`` the node's device plugin advertises."""
    allocatable = resource_list_to_milli((node.get("status") or {}).get("allocatable"))
    return allocatable.get(resource, 0) // 1000


def mig_layout(node: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Per MIG resource: (first parent card index, slices per card), cards after whole ones."""
    allocatable = resource_list_to_milli((node.get("status") or {}).get("allocatable"))
    parent = allocatable.get(WHOLE, 0) // 1000
    out = {}
    for resource in sorted(r for r in allocatable if r.startswith(MIG_PREFIX)):
        profile = resource[len(MIG_PREFIX) :]
        per = slices_per_gpu(profile)
        out[resource] = (parent, per)
        parent += -(-(allocatable[resource] // 1000) // per)
    return out


def is_nvidia_smi(container: dict[str, Any]) -> bool:
    """Whether the container's command is ``nvidia-smi`` (directly or via ``sh -c``)."""
    words = [str(w) for w in [*(container.get("command") or []), *(container.get("args") or [])]]
    if words[:1] and words[0].rsplit("/", 1)[-1] in ("sh", "bash") and "-c" in words[1:2]:
        try:
            words = shlex.split(" ".join(words[2:]))
        except ValueError:
            return False
    return bool(words) and words[0].rsplit("/", 1)[-1] == "nvidia-smi"


def _smi_args(container: dict[str, Any]) -> list[str]:
    words = [str(w) for w in [*(container.get("command") or []), *(container.get("args") or [])]]
    if words[:1] and words[0].rsplit("/", 1)[-1] in ("sh", "bash"):
        try:
            words = shlex.split(" ".join(words[2:]))
        except ValueError:
            return []
    return words[1:]


def _visible(node: dict[str, Any], devices: dict[str, list[int]]) -> list[dict[str, Any]]:
    """The cards the container sees, each with the MIG devices it was given on it."""
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels") or {}
    product = gpu_name(labels.get("nvidia.com/gpu.product", "NVIDIA-GPU"))
    memory = int(labels.get("nvidia.com/gpu.memory", "0") or 0)
    cards: dict[int, dict[str, Any]] = {}
    for index in devices.get(WHOLE, []):
        cards[index] = {"index": index, "mig": []}
    layout = mig_layout(node)
    for resource, slots in devices.items():
        if resource not in layout:
            continue
        first, per = layout[resource]
        profile = resource[len(MIG_PREFIX) :]
        for slot in slots:
            parent = first + slot // per
            card = cards.setdefault(parent, {"index": parent, "mig": []})
            card["mig"].append((profile, slot % per, mig_uuid(name, parent, profile, slot % per)))
    out = []
    for shown, index in enumerate(sorted(cards)):
        card = cards[index]
        out.append(
            {
                "shown": shown,
                "name": product,
                "memory": memory,
                "uuid": gpu_uuid(name, index),
                "bus": f"00000000:{0x07 + index * 8:02X}:00.0",
                "mig": card["mig"],
            }
        )
    return out


def nvidia_smi(
    node: dict[str, Any], devices: dict[str, list[int]], container: dict[str, Any]
) -> list[str]:
    """The output of the container's ``nvidia-smi`` command (``-L`` or the summary table)."""
    cards = _visible(node, devices)
    labels = node["metadata"].get("labels") or {}
    driver = labels.get("nvidia.com/cuda.driver-version.full", "550.107.02")
    cuda = labels.get("nvidia.com/cuda.runtime-version.full", "12.4")
    args = _smi_args(container)
    if not cards:
        return [
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
            "sure that the latest NVIDIA driver is installed and running."
        ]
    if "-L" in args or "--list-gpus" in args:
        lines = []
        for card in cards:
            lines.append(f"GPU {card['shown']}: {card['name']} (UUID: {card['uuid']})")
            for mig_index, (profile, device, uuid) in enumerate(card["mig"]):
                del device
                lines.append(f"  MIG {profile:<11} Device {mig_index:>2}: (UUID: {uuid})")
        return lines
    return _summary(cards, driver, cuda)


_W = (41, 24, 22)  # the three boxes of a GPU row


def _row(left: str, middle: str, right: str) -> str:
    return f"|{left:<{_W[0]}}|{middle:<{_W[1]}}|{right:<{_W[2]}}|"


def _rule(fill: str, ends: str = "+") -> str:
    return ends + "+".join(fill * w for w in _W) + ends


def _wide(text: str) -> str:
    return f"|{text:<{sum(_W) + 2}}|"


def _line(fill: str, ends: str = "+") -> str:
    return ends + fill * (sum(_W) + 2) + ends


def _summary(cards: list[dict[str, Any]], driver: str, cuda: str) -> list[str]:
    lines = [
        time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime()),
        _line("-"),
        _wide(f" NVIDIA-SMI {driver:<22} Driver Version: {driver:<14} CUDA Version: {cuda}"),
        _rule("-", "|"),
        _row(
            " GPU  Name                 Persistence-M",
            " Bus-Id          Disp.A",
            " Volatile Uncorr. ECC",
        ),
        _row(
            " Fan  Temp   Perf          Pwr:Usage/Cap",
            "           Memory-Usage",
            " GPU-Util  Compute M.",
        ),
        _row("", "", "               MIG M."),
        _rule("=", "|"),
    ]
    for card in cards:
        memory = f"1MiB / {card['memory']}MiB"
        lines += [
            _row(
                f" {card['shown']:>3}  {card['name'][:26]:<26}      On",
                f" {card['bus']:>18} Off",
                f" {'On' if card['mig'] else '0':>20}",
            ),
            _row(
                " N/A   34C    P0             61W /  400W",
                f" {memory:>22}",
                f" {'0%      Default':>20}",
            ),
            _row("", "", f" {'Enabled' if card['mig'] else 'Disabled':>20}"),
            _rule("-"),
        ]
    lines += [
        "",
        _line("-"),
        _wide(" Processes:"),
        _wide(f"  GPU   GI   CI        PID   Type   Process name{'GPU Memory':>40}"),
        _wide(
            "        ID   ID                                                               Usage"
        ),
        _line("=", "|"),
        _wide("  No running processes found"),
        _line("-"),
    ]
    return lines
