"""Cluster configuration: node pools, queues, namespaces and simulation settings.

A config file describes *pools* of identical nodes (count, GPU model, allocatable resources,
MIG slices, labels, taints); :func:`build_nodes` expands them into Node objects carrying the
labels the portal maps to GPU models: the ``gpu-type`` label from the Volcano guide and the GPU
Feature Discovery labels (``nvidia.com/gpu.product``, ``.memory``, ``.count``, ``.family``).
The packaged examples are ``small`` (A100/V100/T4) and ``large`` (2,000+ nodes, 6 models).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from kubesim.devices import (
    HAMI_REGISTER,
    POLICY_ANNOTATION,
    VGPU_MEMORY,
    VGPU_NUMBER,
    VGPU_REGISTER,
    register_annotation,
)
from kubesim.gpuinfo import gpu_uuid
from kubesim.quantity import format_milli, to_milli


@dataclass(frozen=True)
class GpuModel:
    """What GFD would report for one GPU model (memory in MiB, a little under marketing GB)."""

    product: str
    memory_mib: int
    family: str
    compute: str
    vendor: str = "nvidia"


# Values follow ../shared/k8s-reference/gpu-models.csv (gfd_product_label, architecture,
# compute_capability); memory is the MiB figure GFD typically reports.
GPU_CATALOG: dict[str, GpuModel] = {
    "h200": GpuModel("NVIDIA-H200", 143771, "hopper", "9.0"),
    "h100-sxm": GpuModel("NVIDIA-H100-80GB-HBM3", 81559, "hopper", "9.0"),
    "h100-pcie": GpuModel("NVIDIA-H100-PCIe", 81559, "hopper", "9.0"),
    "a100-80gb": GpuModel("NVIDIA-A100-SXM4-80GB", 81920, "ampere", "8.0"),
    "a100-80gb-pcie": GpuModel("NVIDIA-A100-80GB-PCIe", 81920, "ampere", "8.0"),
    "a100-40gb": GpuModel("NVIDIA-A100-SXM4-40GB", 40960, "ampere", "8.0"),
    "a100-40gb-pcie": GpuModel("NVIDIA-A100-PCIE-40GB", 40960, "ampere", "8.0"),
    "l40s": GpuModel("NVIDIA-L40S", 46068, "ada-lovelace", "8.9"),
    "l4": GpuModel("NVIDIA-L4", 23034, "ada-lovelace", "8.9"),
    "a10": GpuModel("NVIDIA-A10", 23028, "ampere", "8.6"),
    "a30": GpuModel("NVIDIA-A30", 24576, "ampere", "8.0"),
    "v100-32gb": GpuModel("Tesla-V100-SXM2-32GB", 32768, "volta", "7.0"),
    "v100-16gb": GpuModel("Tesla-V100-SXM2-16GB", 16384, "volta", "7.0"),
    "t4": GpuModel("Tesla-T4", 15360, "turing", "7.5"),
    "rtx-4090": GpuModel("NVIDIA-GeForce-RTX-4090", 24564, "ada-lovelace", "8.9"),
    "mi300x": GpuModel("AMD_Instinct_MI300X_OAM", 196608, "AI", "gfx942", vendor="amd"),
}


@dataclass
class SimSettings:
    """Timings and limits of the simulation, in simulated seconds unless noted."""

    pod_startup_seconds: float = 2.0
    readiness_seconds: float = 1.0  # a readiness probe first passes this long after start
    default_duration_seconds: float | None = 300.0
    pod_termination_seconds: float = 2.0
    config_retry_seconds: float = 10.0  # the kubelet retries a CreateContainerConfigError
    eviction_seconds: float = 0.0
    overcommit_factor: float = 1.2
    history_size: int = 10_000
    max_events: int = 20_000
    bookmark_interval_seconds: float = 1.0  # wall seconds between watch bookmarks
    log_line_interval_seconds: float = 10.0


@dataclass(frozen=True)
class SharingConfig:
    """A pool whose GPUs are split between pods (``sharing:`` in a node pool).

    ``mode``: ``volcano-vgpu`` (allocatable ``volcano.sh/vgpu-number`` = GPUs x split and
    ``volcano.sh/vgpu-memory`` = total MiB, and the plugin's registration annotation) or
    ``hami`` (allocatable ``nvidia.com/gpu`` = GPUs x split, the ``hami.io/node-nvidia-register``
    annotation and the ``gpu=on`` label). ``deviceSplitCount``: shares per device (HAMi's
    default 10); ``deviceMemoryMiB`` defaults to the model's; ``deviceCores``: 100;
    ``policy``: ``binpack`` (fullest device first) or ``spread``.
    """

    mode: str
    device_split_count: int = 10
    device_memory_mib: int | None = None
    device_cores: int = 100
    policy: str = "binpack"


_SHARING_KEYS = {
    "mode": "mode",
    "deviceSplitCount": "device_split_count",
    "deviceMemoryMiB": "device_memory_mib",
    "deviceCores": "device_cores",
    "policy": "policy",
}


@dataclass
class NodePool:
    """A group of identical nodes."""

    name: str
    count: int
    gpu_model: str | None = None
    gpus: int = 0
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = 110
    ephemeral_storage: str = "1Ti"
    mig_gpus: int = 0
    mig_profiles: dict[str, int] = field(default_factory=dict)
    sharing: SharingConfig | None = None
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    gpu_type_label: str | None = None
    product: str | None = None
    name_prefix: str | None = None
    zone: str | None = None


@dataclass
class ClusterConfig:
    """Everything needed to build a simulated cluster."""

    name: str = "kubesim"
    pools: list[NodePool] = field(default_factory=list)
    queues: list[dict[str, Any]] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    simulation: SimSettings = field(default_factory=SimSettings)

    @property
    def node_count(self) -> int:
        """Total nodes over all pools."""
        return sum(pool.count for pool in self.pools)


_POOL_KEYS = {
    "name": "name",
    "count": "count",
    "gpuModel": "gpu_model",
    "gpus": "gpus",
    "cpu": "cpu",
    "memory": "memory",
    "pods": "pods",
    "ephemeralStorage": "ephemeral_storage",
    "labels": "labels",
    "taints": "taints",
    "gpuTypeLabel": "gpu_type_label",
    "product": "product",
    "namePrefix": "name_prefix",
    "zone": "zone",
}
_SIM_KEYS = {
    "podStartupSeconds": "pod_startup_seconds",
    "readinessSeconds": "readiness_seconds",
    "defaultDurationSeconds": "default_duration_seconds",
    "podTerminationSeconds": "pod_termination_seconds",
    "configRetrySeconds": "config_retry_seconds",
    "evictionSeconds": "eviction_seconds",
    "overcommitFactor": "overcommit_factor",
    "historySize": "history_size",
    "maxEvents": "max_events",
    "bookmarkIntervalSeconds": "bookmark_interval_seconds",
    "logLineIntervalSeconds": "log_line_interval_seconds",
}


class ConfigError(ValueError):
    """A cluster config that cannot be used, with the offending key in the message."""


def _pick(raw: dict[str, Any], mapping: dict[str, str], where: str) -> dict[str, Any]:
    unknown = sorted(set(raw) - set(mapping) - {"mig", "sharing"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    return {mapping[key]: value for key, value in raw.items() if key in mapping}


def parse_config(raw: dict[str, Any]) -> ClusterConfig:
    """Build a ClusterConfig from the YAML document's dict, checking keys and GPU models."""
    if not isinstance(raw, dict):
        raise ConfigError("a cluster config must be a mapping")
    extra = sorted(set(raw) - {"name", "nodePools", "queues", "namespaces", "simulation"})
    if extra:
        raise ConfigError(f"unknown top-level key(s) {', '.join(extra)}")
    sim = SimSettings(**_pick(raw.get("simulation") or {}, _SIM_KEYS, "simulation"))
    pools = []
    for index, item in enumerate(raw.get("nodePools") or []):
        where = f"nodePools[{index}]"
        values = _pick(item, _POOL_KEYS, where)
        for key in ("cpu", "memory", "ephemeral_storage"):
            if key in values:
                values[key] = str(values[key])
        mig = item.get("mig") or {}
        if mig:
            values["mig_gpus"] = int(mig.get("gpus", 0))
            values["mig_profiles"] = {
                str(k): int(v) for k, v in (mig.get("profiles") or {}).items()
            }
        if item.get("sharing"):
            values["sharing"] = _parse_sharing(item["sharing"], f"{where}.sharing")
        pool = NodePool(**values)
        if pool.gpu_model and pool.gpu_model not in GPU_CATALOG and not pool.product:
            raise ConfigError(
                f"{where}.gpuModel: unknown model {pool.gpu_model!r}; known: "
                f"{', '.join(sorted(GPU_CATALOG))} (or set product)"
            )
        if pool.count < 0 or pool.gpus < 0 or pool.mig_gpus > pool.gpus:
            raise ConfigError(f"{where}: counts must be >= 0 and mig.gpus <= gpus")
        pools.append(pool)
    return ClusterConfig(
        name=str(raw.get("name", "kubesim")),
        pools=pools,
        queues=list(raw.get("queues") or []),
        namespaces=[str(n) for n in raw.get("namespaces") or []],
        simulation=sim,
    )


def _parse_sharing(raw: Any, where: str) -> SharingConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a mapping")
    sharing = SharingConfig(**_pick(raw, _SHARING_KEYS, where))
    if sharing.mode not in ("volcano-vgpu", "hami"):
        raise ConfigError(f"{where}.mode: must be volcano-vgpu or hami, got {sharing.mode!r}")
    if sharing.policy not in ("binpack", "spread"):
        raise ConfigError(f"{where}.policy: must be binpack or spread, got {sharing.policy!r}")
    if sharing.device_split_count < 1 or not 1 <= sharing.device_cores <= 100:
        raise ConfigError(f"{where}: deviceSplitCount >= 1 and deviceCores 1..100")
    return sharing


def _device_memory_mib(pool: NodePool) -> int:
    model = GPU_CATALOG.get(pool.gpu_model or "")
    assert pool.sharing is not None
    return pool.sharing.device_memory_mib or (model.memory_mib if model else 16384)


def shared_annotations(pool: NodePool, node: str = "") -> dict[str, str]:
    """The device plugin's registration of a shared pool's node (each device by the UUID
    ``nvidia-smi`` shows for it on that node), and kubesim's policy."""
    if pool.sharing is None or not pool.gpus:
        return {}
    sharing = pool.sharing
    model = GPU_CATALOG.get(pool.gpu_model or "")
    text = register_annotation(
        pool.gpus,
        sharing.device_split_count,
        _device_memory_mib(pool),
        sharing.device_cores,
        (model.product if model else pool.product or "GPU").removeprefix("NVIDIA-"),
        [gpu_uuid(node, i) for i in range(pool.gpus)] if node else None,
    )
    key = HAMI_REGISTER if sharing.mode == "hami" else VGPU_REGISTER
    return {key: text, POLICY_ANNOTATION: sharing.policy}


def load_config(source: str | Path | dict[str, Any] = "small") -> ClusterConfig:
    """Load a config from a path, a packaged name (``small``, ``large``) or a dict."""
    if isinstance(source, dict):
        return parse_config(source)
    text: str
    path = Path(source)
    if path.exists():
        text = path.read_text(encoding="utf-8")
    else:
        packaged = resources.files("kubesim") / "configs" / f"{source}.yaml"
        if not packaged.is_file():
            raise ConfigError(f"no such config file or packaged config: {source}")
        text = packaged.read_text(encoding="utf-8")
    return parse_config(yaml.safe_load(text))


def with_settings(config: ClusterConfig, **changes: Any) -> ClusterConfig:
    """A copy of the config with some simulation settings replaced (handy in tests)."""
    return dataclasses.replace(config, simulation=dataclasses.replace(config.simulation, **changes))


def _node_name(pool: NodePool, index: int) -> str:
    width = len(str(max(pool.count - 1, 0)))
    return f"{pool.name_prefix or pool.name}-{index:0{width}d}"


def pool_resources(pool: NodePool) -> dict[str, str]:
    """Allocatable of one node of the pool, as a ResourceList of strings."""
    res = {
        "cpu": format_milli(to_milli(pool.cpu)),
        "memory": format_milli(to_milli(pool.memory), "memory"),
        "pods": str(pool.pods),
        "ephemeral-storage": format_milli(to_milli(pool.ephemeral_storage), "ephemeral-storage"),
    }
    model = GPU_CATALOG.get(pool.gpu_model or "")
    if pool.gpus and pool.sharing is not None:
        split = pool.sharing.device_split_count
        if pool.sharing.mode == "volcano-vgpu":
            res[VGPU_NUMBER] = str(pool.gpus * split)
            res[VGPU_MEMORY] = str(pool.gpus * _device_memory_mib(pool))
        else:
            res["nvidia.com/gpu"] = str(pool.gpus * split)
        return res
    if pool.gpus:
        name = "amd.com/gpu" if model and model.vendor == "amd" else "nvidia.com/gpu"
        res[name] = str(pool.gpus - pool.mig_gpus)
    for profile, count in pool.mig_profiles.items():
        res[f"nvidia.com/mig-{profile.replace('+', '.')}"] = str(count)
    return res


def _gpu_labels(pool: NodePool) -> dict[str, str]:
    if not pool.gpus:
        return {}
    model = GPU_CATALOG.get(pool.gpu_model or "")
    product = pool.product or (model.product if model else "unknown")
    labels = {"gpu-type": pool.gpu_type_label or pool.gpu_model or product}
    if model and model.vendor == "amd":
        labels.update(
            {
                "amd.com/gpu.product-name": product,
                "amd.com/gpu.vram": f"{model.memory_mib // 1024}G",
                "amd.com/gpu.family": model.family,
            }
        )
        return labels
    labels.update(
        {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(pool.gpus),
            "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu.mode": "compute",
            "nvidia.com/cuda.driver-version.full": "550.107.02",
            "nvidia.com/cuda.runtime-version.full": "12.5",
        }
    )
    if model:
        major, _, minor = model.compute.partition(".")
        labels.update(
            {
                "nvidia.com/gpu.memory": str(model.memory_mib),
                "nvidia.com/gpu.family": model.family,
                "nvidia.com/gpu.compute.major": major,
                "nvidia.com/gpu.compute.minor": minor or "0",
            }
        )
    if pool.sharing is not None:
        labels["nvidia.com/gpu.replicas"] = str(pool.sharing.device_split_count)
        if pool.sharing.mode == "hami":
            labels["gpu"] = "on"  # HAMi's opt-in label
    if pool.mig_profiles:
        labels["nvidia.com/mig.capable"] = "true"
        labels["nvidia.com/mig.strategy"] = "mixed"
        for profile, count in pool.mig_profiles.items():
            labels[f"nvidia.com/mig-{profile.replace('+', '.')}.count"] = str(count)
    return labels


def build_nodes(config: ClusterConfig) -> list[dict[str, Any]]:
    """Expand the pools into Node objects (status included, as a kubelet would report it)."""
    nodes = []
    address = int(ipaddress.IPv4Address("10.0.0.10"))
    for pool in config.pools:
        allocatable = pool_resources(pool)
        gpu_labels = _gpu_labels(pool)
        for index in range(pool.count):
            name = _node_name(pool, index)
            annotations = shared_annotations(pool, name)
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": f"kubesim.{pool.name}",
                "kubesim.gpupool.dev/pool": pool.name,
                **gpu_labels,
                **pool.labels,
            }
            if pool.zone:
                labels["topology.kubernetes.io/zone"] = pool.zone
            ip = str(ipaddress.IPv4Address(address + len(nodes)))
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": labels, "annotations": dict(annotations)},
                    "spec": {
                        "podCIDR": f"10.{64 + len(nodes) // 256}.{len(nodes) % 256}.0/24",
                        "providerID": f"kubesim://{config.name}/{name}",
                        **({"taints": [dict(t) for t in pool.taints]} if pool.taints else {}),
                    },
                    "status": {
                        "capacity": dict(allocatable),
                        "allocatable": dict(allocatable),
                        "addresses": [
                            {"type": "InternalIP", "address": ip},
                            {"type": "Hostname", "address": name},
                        ],
                        "nodeInfo": {
                            "architecture": "amd64",
                            "bootID": f"boot-{name}",
                            "containerRuntimeVersion": "containerd://1.7.22",
                            "kernelVersion": "5.15.0-kubesim",
                            "kubeProxyVersion": "v1.31.0",
                            "kubeletVersion": "v1.31.0-kubesim",
                            "machineID": f"machine-{name}",
                            "operatingSystem": "linux",
                            "osImage": "Ubuntu 22.04.4 LTS",
                            "systemUUID": f"uuid-{name}",
                        },
                        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                    },
                }
            )
    return nodes
