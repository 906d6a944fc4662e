"""kubesim: a Kubernetes API server with simulated GPU nodes and Volcano.

The portal talks to clusters only through the official ``kubernetes`` client, so tests, CI and
the demo need something that speaks the real wire protocol without a real cluster. kubesim is
that stand-in: HTTPS with a generated CA and bearer tokens, core v1 nodes/namespaces/pods/
events/configmaps/secrets/services, the Volcano Job/Queue/PodGroup/Command CRDs validated
against their real schemas, watches with resourceVersion semantics, OpenAPI documents,
server-side tables and the metrics API (so the real ``kubectl`` works), and a simulated Volcano
scheduler (configured by its ConfigMap), job and queue controllers and kubelet driven by a
controllable clock. See ``docs/kubesim.md``.
"""

from __future__ import annotations

from kubesim.auth import Rule
from kubesim.cluster import KubeSim
from kubesim.config import ClusterConfig, ConfigError, NodePool, SimSettings, load_config
from kubesim.errors import ApiError
from kubesim.faults import Fault, FaultInjector

__all__ = [
    "ApiError",
    "ClusterConfig",
    "ConfigError",
    "Fault",
    "FaultInjector",
    "KubeSim",
    "NodePool",
    "Rule",
    "SimSettings",
    "load_config",
]
