"""Rules (1) and (2): GPU nodes that advertise no GPUs, and model labels the scheduler cannot
match against the catalog."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from clusters.doctor.facts import (
    ERROR,
    GFD_PRODUCT,
    GPU_PRESENT,
    INFO,
    MAX_NODES_NAMED,
    NEW_NODE_GRACE,
    WARNING,
    CatalogFacts,
    Finding,
    ModelFacts,
)
from clusters.doctor.nodes import (
    _gpu_nodes,
    _named,
    _Node,
    _plural,
    _verb,
)


def check_gpus_advertised(
    nodes: Iterable[Mapping[str, Any]],
    *,
    gpu_label: str,
    now: dt.datetime | None = None,
    grace: dt.timedelta = NEW_NODE_GRACE,
) -> list[Finding]:
    """GPU nodes whose allocatable GPUs are 0: the device plugin is not running there, or it
    runs and finds every GPU unhealthy. Pods asking for ``nvidia.com/gpu`` then stay Pending
    with "Insufficient nvidia.com/gpu" although the node plainly has GPUs.

    A node still starting (younger than ``grace`` at ``now``, or NotReady) has no GPUs yet on
    every scale-up: it is said as info, never as the error."""
    absent: list[str] = []
    unhealthy: list[str] = []
    starting: list[tuple[str, str]] = []
    for node in _gpu_nodes(nodes, gpu_label):
        if node.gpus_allocatable > 0:
            continue
        why = node.starting(now, grace)
        if why:
            starting.append((node.name, why))
            continue
        (unhealthy if node.gpus_capacity > 0 else absent).append(node.name)
    findings = []
    if starting:
        names = [name for name, _ in starting]
        whys = "; ".join(f"{name}: {why}" for name, why in starting[:MAX_NODES_NAMED])
        minutes = int(grace.total_seconds() // 60)
        findings.append(
            Finding(
                code="gpus-node-starting",
                severity=INFO,
                title=f"{_plural(len(names), 'GPU node')} still starting, no GPUs advertised "
                f"yet: {_named(names)}",
                explanation=f"These nodes joined less than {minutes} minutes ago or are "
                f"NotReady ({whys}). The GPU Operator installs the driver and starts the "
                "device plugin on a new node within minutes; until then the node advertises "
                "no GPUs and no job is placed there. The doctor looks again on every "
                f"inventory sync and raises an error if a Ready node still has none after "
                f"{minutes} minutes.",
                fix="Nothing yet. If it lasts, kubectl get pods -n gpu-operator -o wide shows "
                "which GPU Operator pod on the node is not running.",
                nodes=tuple(names),
            )
        )
    if absent:
        findings.append(
            Finding(
                code="gpus-not-advertised",
                severity=ERROR,
                title=f"{_plural(len(absent), 'GPU node')} "
                f"{_verb(len(absent), 'advertises', 'advertise')} no GPUs: {_named(absent)}",
                explanation="These nodes carry GPU labels (GPU Feature Discovery's product, "
                f"{GPU_PRESENT}, or the model label) but list no nvidia.com/gpu in their "
                "capacity: the NVIDIA device plugin is not running on them, or it started "
                "before the driver and gave up. Pods that ask for GPUs stay Pending with "
                '"0/N nodes are available: Insufficient nvidia.com/gpu", and the portal '
                "counts no free GPUs there.",
                fix="Look at the device plugin pod on each node: kubectl get pods -n "
                "gpu-operator -o wide (or the namespace you installed it in), then kubectl "
                "logs it. The usual cause is a driver / container toolkit mismatch "
                "(nvidia-smi fails on the node, or the container runtime is not configured "
                "for the nvidia runtime). Fix the driver, then delete the device plugin pod "
                "so it starts again and registers the GPUs.",
                nodes=tuple(absent),
            )
        )
    if unhealthy:
        findings.append(
            Finding(
                code="gpus-all-unhealthy",
                severity=ERROR,
                title=f"{_plural(len(unhealthy), 'GPU node')} "
                f"{_verb(len(unhealthy), 'has', 'have')} GPUs but none allocatable: "
                f"{_named(unhealthy)}",
                explanation="The device plugin registered GPUs on these nodes (their capacity "
                "lists them) but reports 0 allocatable: it marked every GPU unhealthy "
                "(an XID error, a GPU fallen off the bus, a driver that stopped answering). "
                "No pod can get a GPU there.",
                fix="Run nvidia-smi on the node and read the device plugin's log for the "
                "health events; a GPU reset or a node reboot usually brings them back. "
                "Cordon the node (kubectl cordon) until it is fixed.",
                nodes=tuple(unhealthy),
            )
        )
    return findings


# ---------------------------------------------------------------------------------------------
# (2) The model label
# ---------------------------------------------------------------------------------------------
def _model_of(node: _Node, catalog: CatalogFacts, gpu_label: str) -> ModelFacts | None:
    """The card a node has, by its model label or else GFD's product (a MIG-single product
    names its card without the ``-MIG-<profile>`` suffix)."""
    found = catalog.match(node.labels.get(gpu_label, ""))
    if found is None and node.product:
        found = catalog.match(node.product.split("-MIG-")[0])
    if found is None:
        return None
    model = found[1]
    if model.is_slice:  # a label naming a slice model: the card is its parent
        parent = catalog.match(model.card)
        return parent[1] if parent else model
    return model


def check_model_labels(
    nodes: Iterable[Mapping[str, Any]], *, catalog: CatalogFacts, gpu_label: str
) -> list[Finding]:
    """The cluster's model label (``gpu-type`` by default) on every GPU node: missing, unknown
    to the catalog, right but for its case, and one model spelled several ways."""
    gpu_nodes = _gpu_nodes(nodes, gpu_label)
    missing_unknown: list[str] = []
    missing_known: list[str] = []
    case: dict[tuple[str, str], list[str]] = defaultdict(list)  # (value, catalog's) -> nodes
    unknown: dict[str, list[str]] = defaultdict(list)
    spellings: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for node in gpu_nodes:
        value = node.labels.get(gpu_label, "")
        model = _model_of(node, catalog, gpu_label)
        if not value:
            (missing_known if model is not None else missing_unknown).append(node.name)
            continue
        if model is not None:
            spellings[model.key][value].append(node.name)
        found = catalog.match(value)
        if found is None:
            unknown[value].append(node.name)
        elif found[0] != value:
            case[(value, found[0])].append(node.name)
    findings: list[Finding] = []
    if missing_unknown:
        findings.append(
            Finding(
                code="model-label-missing",
                severity=WARNING,
                title=f"{_plural(len(missing_unknown), 'GPU node')} without the {gpu_label} "
                f"label and no known product: {_named(missing_unknown)}",
                explanation=f"The portal finds a node's GPU model by its {gpu_label} label, "
                f"else by GPU Feature Discovery's {GFD_PRODUCT}. These nodes have neither a "
                f"{gpu_label} label nor a product the catalog knows, so their GPUs are listed "
                "as unknown and no job is placed on them.",
                fix=f"Label them with the catalog key of their GPU: kubectl label node "
                f"<node> {gpu_label}=<key> (the keys are on the GPU models page), or add their "
                f"{GFD_PRODUCT} value to the model's product labels in the catalog.",
                nodes=tuple(missing_unknown),
            )
        )
    if missing_known:
        findings.append(
            Finding(
                code="model-label-missing-gfd",
                severity=INFO,
                title=f"{_plural(len(missing_known), 'GPU node')} without the {gpu_label} "
                f"label, found by their GFD product: {_named(missing_known)}",
                explanation=f"These nodes have no {gpu_label} label; the portal recognises "
                f"their GPUs by {GFD_PRODUCT} instead and schedules them. Job manifests "
                f"written by hand with nodeSelector {gpu_label}=… will not reach them.",
                fix=f"Label them like the other nodes of their model (kubectl label node "
                f"<node> {gpu_label}=<key>), or select by {GFD_PRODUCT} in your own manifests.",
                nodes=tuple(missing_known),
            )
        )
    for (value, canonical), names in sorted(case.items()):
        findings.append(
            Finding(
                code="model-label-case",
                severity=WARNING,
                subject=value,
                title=f"{gpu_label}={value} differs only in case from the catalog's {canonical}",
                explanation=f"Label values are case-sensitive in Kubernetes: a nodeSelector "
                f"{gpu_label}={canonical} (or a Volcano predicate matching it) does not match "
                f"nodes labelled {value}, so jobs written for {canonical} stay Pending while "
                f"these nodes sit idle. The portal itself reads labels without regard to case "
                f"and names the nodes it means, but hand-written manifests and other "
                f"schedulers do not. Nodes: {_named(names)}.",
                fix=f"Relabel them with the catalog's spelling: kubectl label node "
                f"{' '.join(names[:MAX_NODES_NAMED])} {gpu_label}={canonical} --overwrite",
                nodes=tuple(names),
            )
        )
    # Values the catalog does not know may still disagree only in case with each other
    # (A100 on some nodes, a100 on the rest): the spelling most nodes carry is the one to keep.
    by_lower: dict[str, list[str]] = defaultdict(list)
    for value in unknown:
        by_lower[value.lower()].append(value)
    for spellings_of in by_lower.values():
        if len(spellings_of) < 2:
            continue
        kept = max(sorted(spellings_of), key=lambda v: len(unknown[v]))
        for value in sorted(spellings_of):
            if value == kept:
                continue
            names = unknown[value]
            findings.append(
                Finding(
                    code="model-label-case",
                    severity=WARNING,
                    subject=value,
                    title=f"{gpu_label}={value} differs only in case from {kept} on other nodes",
                    explanation=f"Label values are case-sensitive in Kubernetes: a nodeSelector "
                    f"{gpu_label}={kept} does not match nodes labelled {value}, so jobs written "
                    f"for {kept} never reach them. Nodes: {_named(names)}.",
                    fix=f"Relabel them like the others: kubectl label node "
                    f"{' '.join(names[:MAX_NODES_NAMED])} {gpu_label}={kept} --overwrite (and "
                    "add the GPU to the catalog, which knows neither spelling)",
                    nodes=tuple(names),
                )
            )
    for value, names in sorted(unknown.items()):
        wanted = set(names)
        these = [n for n in gpu_nodes if n.name in wanted]
        products = sorted({n.product for n in these if n.product} or {""})
        model = next(
            (m for n in these if (m := _model_of(n, catalog, gpu_label))),
            None,
        )
        scheduled = (
            f"The portal still recognises them by {GFD_PRODUCT} as {model.key}."
            if model is not None
            else "Their GPUs are listed as unknown and no job is placed on them."
        )
        findings.append(
            Finding(
                code="model-label-unknown",
                severity=WARNING,
                subject=value,
                title=f"{gpu_label}={value} is not a GPU model the catalog knows",
                explanation=f"No catalog model has the key or product label {value!r} "
                f"(product on these nodes: {', '.join(p for p in products if p) or 'none'}). "
                f"{scheduled} Nodes: {_named(names)}.",
                fix=(
                    f"Relabel them with the catalog key: kubectl label node "
                    f"{' '.join(names[:MAX_NODES_NAMED])} {gpu_label}={model.key} --overwrite"
                    if model is not None
                    else f"Add the GPU to the catalog (with {value} among its product "
                    f"labels), or relabel the nodes with the key of a catalog model: kubectl "
                    f"label node <node> {gpu_label}=<key> --overwrite"
                ),
                nodes=tuple(names),
            )
        )
    for key, values in sorted(spellings.items()):
        if len(values) < 2:
            continue
        names = sorted(n for group in values.values() for n in group)
        spelled = "; ".join(
            f"{value} on {_plural(len(group), 'node')}" for value, group in sorted(values.items())
        )
        findings.append(
            Finding(
                code="model-label-split",
                severity=WARNING,
                subject=key,
                title=f"The {key} nodes are split across {len(values)} {gpu_label} values",
                explanation=f"Nodes with the same GPU ({key}) carry different {gpu_label} "
                f"values: {spelled}. A job selecting one value reaches only part of the "
                f"model's nodes; the portal falls back to naming nodes, but Volcano queues, "
                f"dashboards and hand-written manifests see two models where there is one.",
                fix=f"Give every {key} node the same value: kubectl label node <node> "
                f"{gpu_label}={key} --overwrite",
                nodes=tuple(names),
            )
        )
    return findings
