"""Rule (3): MIG, the strategy and the slices a node offers, against the catalog's models."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from clusters.doctor.facts import (
    MIG_PREFIX,
    MIG_STRATEGIES,
    MIG_STRATEGY,
    WARNING,
    WHOLE_GPU_RESOURCES,
    CatalogFacts,
    Finding,
)
from clusters.doctor.gpus import _model_of
from clusters.doctor.nodes import (
    _gpu_nodes,
    _named,
    _plural,
    _verb,
)


def check_mig(
    nodes: Iterable[Mapping[str, Any]], *, catalog: CatalogFacts, gpu_label: str
) -> list[Finding]:
    """MIG slices and whole cards offered by one node; a node's MIG strategy that contradicts
    what it advertises, or differs from the rest of the cluster; and slices the catalog has no
    model for (what the device plugin's strategy produces is not what the catalog expects)."""
    gpu_nodes = _gpu_nodes(nodes, gpu_label)
    both: list[str] = []
    contradict: list[str] = []
    bad_value: dict[str, list[str]] = defaultdict(list)
    strategies: dict[str, list[str]] = defaultdict(list)
    unknown_slices: dict[str, list[str]] = defaultdict(list)
    for node in gpu_nodes:
        mig = node.mig_allocatable
        whole = sum(node.allocatable.get(r, 0) for r in WHOLE_GPU_RESOURCES)
        strategy = node.labels.get(MIG_STRATEGY, "")
        if strategy:
            strategies[strategy].append(node.name)
            if strategy not in MIG_STRATEGIES:
                bad_value[strategy].append(node.name)
        if mig and whole:
            both.append(node.name)
        if (strategy == "single" and mig) or (strategy == "mixed" and node.mig_single):
            contradict.append(node.name)
        card = _model_of(node, catalog, gpu_label)
        card_key = card.key if card else ""
        product = node.product.split("-MIG-")[0]
        for resource in mig:
            profile = resource.removeprefix(MIG_PREFIX)
            if not catalog.slice_known(card_key, profile, product):
                unknown_slices[profile].append(node.name)
        if node.mig_single and catalog.match(node.product) is None:
            unknown_slices[node.product.split("-MIG-")[1]].append(node.name)
    findings: list[Finding] = []
    if both:
        findings.append(
            Finding(
                code="mig-and-whole-gpus",
                severity=WARNING,
                title=f"{_plural(len(both), 'node')} {_verb(len(both), 'offers', 'offer')} "
                f"MIG slices and whole GPUs side by side: {_named(both)}",
                explanation="Some GPUs of these nodes are cut into MIG slices and the others "
                "are whole (the device plugin's mixed strategy). The portal counts each kind "
                "as its own model, but any pod asking for nvidia.com/gpu lands on the whole "
                "cards of a node meant for slices, a nodeSelector on the model label matches "
                "the node for both kinds, and under the single strategy such a node "
                "advertises nothing at all.",
                fix="Give each node one layout: partition every GPU (label "
                "nvidia.com/mig.config=all-1g.10gb, or another all-<profile> layout, for the "
                "GPU Operator's MIG manager) or none (nvidia.com/mig.config=all-disabled), and "
                "keep MIG nodes and whole-card nodes in separate node pools with their own "
                "model label.",
                nodes=tuple(both),
            )
        )
    if contradict:
        findings.append(
            Finding(
                code="mig-strategy-contradicts",
                severity=WARNING,
                title=f"{_plural(len(contradict), 'node')} "
                f"{_verb(len(contradict), 'advertises', 'advertise')} MIG slices the way their "
                f"{MIG_STRATEGY} label says they should not: {_named(contradict)}",
                explanation=f"Under strategy single every slice is an nvidia.com/gpu and GFD's "
                f"product ends in -MIG-<profile>; under mixed each profile is its own "
                f"nvidia.com/mig-<profile> resource. These nodes' {MIG_STRATEGY} label and "
                "what they advertise disagree: the device plugin and GPU Feature Discovery "
                "run with different strategies, so the labels the portal maps GPUs by are "
                "wrong.",
                fix="Set the same migStrategy for the device plugin and GFD (the GPU "
                "Operator's mig.strategy value, or the device plugin's MIG_STRATEGY), then "
                "restart both on these nodes.",
                nodes=tuple(contradict),
            )
        )
    for value, names in sorted(bad_value.items()):
        findings.append(
            Finding(
                code="mig-strategy-unknown",
                severity=WARNING,
                subject=value,
                title=f"{MIG_STRATEGY}={value} is not a MIG strategy",
                explanation=f"The device plugin knows the strategies none, single and mixed; "
                f"{value!r} means its configuration is not what was intended. Nodes: "
                f"{_named(names)}.",
                fix="Set the device plugin's and GFD's MIG strategy to single or mixed.",
                nodes=tuple(names),
            )
        )
    if len(strategies) > 1:
        names = sorted(n for group in strategies.values() for n in group)
        spelled = "; ".join(
            f"{value} on {_plural(len(group), 'node')}"
            for value, group in sorted(strategies.items())
        )
        findings.append(
            Finding(
                code="mig-strategies-differ",
                severity=WARNING,
                title="The cluster's nodes run different MIG strategies",
                explanation=f"{MIG_STRATEGY} differs between nodes: {spelled}. The strategy "
                "is meant to be one setting for the whole cluster; a node that differs was "
                "configured by hand or missed an upgrade, and its slices are advertised under "
                "other resource names than the catalog expects.",
                fix="Use one migStrategy for the whole cluster (the GPU Operator's "
                "mig.strategy) and restart the device plugin and GFD on the odd nodes.",
                nodes=tuple(names),
            )
        )
    for profile, names in sorted(unknown_slices.items()):
        findings.append(
            Finding(
                code="mig-profile-unknown",
                severity=WARNING,
                subject=profile,
                title=f"MIG slices {profile} are not in the catalog",
                explanation=f"These nodes offer MIG {profile} slices, but the catalog has no "
                f"slice model for {profile} of their GPU, so the slices are listed as unknown "
                f"and never scheduled. Nodes: {_named(sorted(set(names)))}.",
                fix=f"Add the {profile} slice of this GPU to the catalog, or change the MIG "
                "layout (nvidia.com/mig.config) to profiles the catalog offers.",
                nodes=tuple(sorted(set(names))),
            )
        )
    return findings
