"""The cluster doctor: the classic ways a GPU cluster is set up wrong, found and explained.

Each rule reads plain data (the node objects as the API server returns them, the catalog as
:class:`CatalogFacts`, what was read of Volcano and of Prometheus) and returns
:class:`Finding` objects: a stable code, a severity, a title in plain words, what it means for
jobs, the fix, and the nodes it concerns. Nothing here talks to a cluster, a database or Django,
so every rule is tested on hand-written node dicts; :mod:`clusters.checkup` gathers the inputs,
stores the findings and tells the platform admins what is new.

The rules follow the troubleshooting section every GPU-on-Kubernetes guide has
(``docs/doctor.md``): GPUs the device plugin does not advertise, a model label the scheduler
cannot match, MIG slices and whole cards offered side by side, Volcano missing or configured
without what the portal's jobs need, and no DCGM data where metrics are expected.

Severity: ``error`` means jobs fail or wait forever (no GPUs advertised, Volcano absent,
no ``allocate``); ``warning`` means something works differently than the portal or a user
expects (a label the selector misses, quotas not enforced on the cluster); ``info`` is worth
knowing and needs no action to keep jobs running.

The package: ``facts`` (the inputs, the :class:`Finding` and the names the rules look for),
``nodes`` (a node object read into what the rules ask), one module per rule family (``gpus``:
(1) and (2), ``mig``, ``volcano``, ``dcgm``), and :func:`diagnose` here, which runs them all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from clusters.doctor.dcgm import check_dcgm
from clusters.doctor.facts import (
    ERROR,
    INFO,
    NEW_NODE_GRACE,
    SEVERITIES,
    VOLCANO_CONF_KEY,
    VOLCANO_CONFIGMAP,
    VOLCANO_NAMESPACE,
    WARNING,
    CatalogFacts,
    DcgmFacts,
    Finding,
    ModelFacts,
    VolcanoFacts,
)
from clusters.doctor.gpus import check_gpus_advertised, check_model_labels
from clusters.doctor.mig import check_mig
from clusters.doctor.volcano import check_volcano

__all__ = [
    "ERROR",
    "INFO",
    "NEW_NODE_GRACE",
    "SEVERITIES",
    "VOLCANO_CONFIGMAP",
    "VOLCANO_CONF_KEY",
    "VOLCANO_NAMESPACE",
    "WARNING",
    "CatalogFacts",
    "DcgmFacts",
    "Finding",
    "ModelFacts",
    "VolcanoFacts",
    "check_dcgm",
    "check_gpus_advertised",
    "check_mig",
    "check_model_labels",
    "check_volcano",
    "diagnose",
]


def diagnose(
    *,
    nodes: Sequence[Mapping[str, Any]],
    catalog: CatalogFacts,
    gpu_label: str,
    volcano: VolcanoFacts | None = None,
    dcgm: DcgmFacts | None = None,
    now: dt.datetime | None = None,
    grace: dt.timedelta = NEW_NODE_GRACE,
) -> list[Finding]:
    """Every rule over one cluster, most serious first (then by code and subject). ``now``
    dates the nodes' ages (None: no node counts as new); ``grace`` is how long a new node may
    take to bring its GPUs up before they are missed."""
    findings = [
        *check_gpus_advertised(nodes, gpu_label=gpu_label, now=now, grace=grace),
        *check_model_labels(nodes, catalog=catalog, gpu_label=gpu_label),
        *check_mig(nodes, catalog=catalog, gpu_label=gpu_label),
        *(check_volcano(volcano) if volcano is not None else []),
        *check_dcgm(dcgm, nodes, gpu_label=gpu_label, now=now, grace=grace),
    ]
    return sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), f.code, f.subject))
