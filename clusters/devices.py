"""The devices of a shared-GPU node, and where a share landed, in the sharing modes' own words.

Pure (standard library only), read by the inventory, the bindings and the reconcile.

A shared node's device plugin registers each device in a node annotation: HAMi in
``hami.io/node-nvidia-register``, the Volcano vGPU plugin in ``volcano.sh/node-vgpu-register``,
both as ``uuid,split,memoryMiB,cores,type,numa,health[,index,mode]`` records separated by
colons (newer HAMi releases write a JSON list instead). When a share is placed, the scheduler
writes the devices it chose on the pod: HAMi in ``hami.io/vgpu-devices-allocated``, Volcano's
deviceshare plugin in ``volcano.sh/vgpu-ids-new``, as ``uuid,type,memoryMiB,cores:`` per device
and ``;`` per container (Project-HAMi ``docs/develop/protocol.md``). That is how the portal
learns which device a share really holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ALLOCATED_ANNOTATIONS",
    "HAMI_ALLOCATED",
    "HAMI_REGISTER",
    "REGISTER_ANNOTATIONS",
    "VGPU_ALLOCATED",
    "VGPU_REGISTER",
    "allocated_devices",
    "pod_device",
    "registered_devices",
    "registration_records",
]

HAMI_REGISTER = "hami.io/node-nvidia-register"
VGPU_REGISTER = "volcano.sh/node-vgpu-register"
REGISTER_ANNOTATIONS = (HAMI_REGISTER, VGPU_REGISTER)
HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
VGPU_ALLOCATED = "volcano.sh/vgpu-ids-new"
ALLOCATED_ANNOTATIONS = (HAMI_ALLOCATED, VGPU_ALLOCATED)


def _int(value: Any) -> int:
    try:
        return max(0, int(str(value).strip()))
    except (TypeError, ValueError):
        return 0


def registered_devices(annotations: Mapping[str, Any]) -> list[tuple[str, int, int]]:
    """(UUID, memory MiB, cores %) per healthy device a shared node registered, in its order;
    empty when the node registered none (or nothing readable)."""
    text = next((str(annotations[k]) for k in REGISTER_ANNOTATIONS if annotations.get(k)), "")
    return [(uuid, mib, cores) for uuid, _, mib, cores in registration_records(text)]


def registration_records(text: str) -> list[tuple[str, int, int, int]]:
    """(UUID, split count, memory MiB, cores %) per healthy device of a node's registration
    annotation, in its order; devices without memory and unreadable text give none.

    Two encodings exist: the JSON list of newer releases (``[{"id": …, "count": 10,
    "devmem": 81920, "devcore": 100, "type": "NVIDIA-…", "health": true}, …]``) and the older
    ``id,count,devmem,devcore,type,numa,health:`` records separated by colons."""
    text = text.strip()
    out: list[tuple[str, int, int, int]] = []
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            return []
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("health", True) is not False:
                out.append(
                    (
                        str(item.get("id") or ""),
                        _int(item.get("count")),
                        _int(item.get("devmem")),
                        _int(item.get("devcore")),
                    )
                )
    else:
        for record in text.split(":"):
            parts = record.split(",")
            if len(parts) < 4 or (len(parts) >= 7 and parts[6].strip().lower() == "false"):
                continue
            out.append((parts[0].strip(), _int(parts[1]), _int(parts[2]), _int(parts[3])))
    return [d for d in out if d[2]]
    for record in text.split(":"):
        parts = record.split(",")
        if len(parts) < 4 or (len(parts) >= 7 and parts[6].strip().lower() == "false"):
            continue
        out.append((parts[0].strip(), _int(parts[2]), _int(parts[3])))
    return [d for d in out if d[1]]


def allocated_devices(annotations: Mapping[str, Any]) -> list[tuple[str, int, int]]:
    """(UUID, memory MiB, cores %) of every device the scheduler gave a pod (all containers),
    from HAMi's or Volcano vGPU's allocation annotation; empty when it has none yet."""
    text = ""
    for key in ALLOCATED_ANNOTATIONS:
        if annotations.get(key):
            text = str(annotations[key])
            break
    out: list[tuple[str, int, int]] = []
    for container in text.split(";"):
        for device in container.split(":"):
            parts = device.split(",")
            if len(parts) >= 3 and parts[0].strip():
                out.append(
                    (parts[0].strip(), _int(parts[2]), _int(parts[3]) if len(parts) > 3 else 0)
                )
    return out


def pod_device(pod: Mapping[str, Any]) -> str:
    """The device a share's pod holds, as a device plan names it: its UUID (several joined
    by ``+``, in order, each once); "" when the pod says nothing of its devices."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return "+".join(dict.fromkeys(uuid for uuid, _, _ in allocated_devices(annotations)))
