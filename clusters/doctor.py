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
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = [
    "ERROR",
    "INFO",
    "NEW_NODE_GRACE",
    "SEVERITIES",
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

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)
"""Most serious first: the order findings are listed in."""

GFD_PRODUCT = "nvidia.com/gpu.product"
AMD_PRODUCT = "amd.com/gpu.product-name"
GPU_PRESENT = "nvidia.com/gpu.present"
GPU_COUNT = "nvidia.com/gpu.count"
MIG_STRATEGY = "nvidia.com/mig.strategy"
MIG_PREFIX = "nvidia.com/mig-"
WHOLE_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
SHARED_GPU_RESOURCES = ("volcano.sh/vgpu-number",)
MIG_STRATEGIES = ("none", "single", "mixed")

VOLCANO_GROUPS = ("batch.volcano.sh/v1alpha1", "scheduling.volcano.sh/v1beta1")
VOLCANO_NAMESPACE = "volcano-system"
VOLCANO_CONFIGMAP = "volcano-scheduler-configmap"
VOLCANO_CONF_KEY = "volcano-scheduler.conf"

NEW_NODE_GRACE = dt.timedelta(minutes=10)
"""A GPU node younger than this (or NotReady) is still starting: the GPU Operator installs the
driver and starts the device plugin and the DCGM exporter on a node after it joins, which takes
minutes, so until then "no GPUs advertised" and "no DCGM metrics" are the expected state, not a
fault to raise to the admins on every scale-up."""

MAX_NODES_NAMED = 20
"""A finding's title and text name at most this many nodes (the full list is in ``nodes``)."""


@dataclass(frozen=True)
class Finding:
    """One thing wrong (or worth knowing) about a cluster, in words an admin can act on.

    ``code`` says which rule found it; ``subject`` tells two findings of one rule apart (the
    label value, the MIG profile); together they are the finding's identity from one check to
    the next, so a finding that persists is not news, and one that appears is.
    """

    code: str
    severity: str
    title: str
    explanation: str
    fix: str
    nodes: tuple[str, ...] = ()
    subject: str = ""
    detail: str = ""
    """The raw error behind the finding (Prometheus's or the API server's own words, which can
    name hosts and addresses): for platform admins only, never in the explanation every user
    reads."""

    @property
    def key(self) -> str:
        return f"{self.code}:{self.subject}" if self.subject else self.code

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "title": self.title,
            "explanation": self.explanation,
            "fix": self.fix,
            "nodes": list(self.nodes),
            "subject": self.subject,
            "detail": self.detail,
        }


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelFacts:
    """One catalog model, as the rules need it."""

    key: str
    product_labels: tuple[str, ...] = ()
    resource_name: str = "nvidia.com/gpu"
    shared: bool = False
    """A shared (fractional) pool of a card: never named by a label of its own."""

    @property
    def is_slice(self) -> bool:
        return self.resource_name.startswith(MIG_PREFIX)

    @property
    def card(self) -> str:
        """The card a MIG slice is cut from (``a100-80gb-mig-1g.10gb`` → ``a100-80gb``)."""
        if not self.is_slice:
            return self.key
        whole, sep, _ = self.key.partition("-mig-")
        return whole if sep else self.key


@dataclass
class CatalogFacts:
    """The GPU model catalog, indexed the ways a node's labels name a model (the same matching
    as ``clusters.inventory.Catalog``: the cluster's label names a key or a product label,
    GPU Feature Discovery's product names a product label, both without regard to case)."""

    models: Sequence[ModelFacts] = ()
    _values: dict[str, tuple[str, ModelFacts]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for model in self.models:
            if model.shared:
                continue
            for value in (model.key, *model.product_labels):
                self._values.setdefault(value.lower(), (value, model))

    def match(self, value: str) -> tuple[str, ModelFacts] | None:
        """(the catalog's own spelling, the model) of a label value, ignoring case."""
        return self._values.get(value.lower()) if value else None

    def slice_known(self, card: str, profile: str, product: str) -> bool:
        """Whether the catalog has the MIG slice ``profile`` of ``card`` (or of the product)."""
        for model in self.models:
            resource = f"{MIG_PREFIX}{profile}"
            if model.is_slice and model.resource_name == resource and card and model.card == card:
                return True
        return bool(product) and self.match(f"{product}-MIG-{profile}") is not None


@dataclass(frozen=True)
class VolcanoFacts:
    """What was read of Volcano on the cluster.

    ``served``: the API group/versions the server lists (None: the list could not be read).
    ``config``: the text of ``volcano-scheduler.conf`` (None when not read); ``config_problem``
    says why it was not: ``"not-found"``, ``"no-key"``, ``"forbidden"`` or the error in words.
    """

    served: frozenset[str] | None
    config: str | None = None
    config_problem: str = ""


@dataclass(frozen=True)
class DcgmFacts:
    """What Prometheus said about DCGM exporter series on the cluster.

    ``configured``: the cluster has a Prometheus URL. ``error``: why Prometheus could not be
    asked (empty when it answered). ``hosts``: node names that report DCGM series (from the
    exporter's ``Hostname``/``hostname`` label); ``series``: how many series in all.
    """

    configured: bool
    error: str = ""
    hosts: frozenset[str] = frozenset()
    series: int = 0


# ---------------------------------------------------------------------------------------------
# Reading nodes
# ---------------------------------------------------------------------------------------------
def _count(value: Any) -> int:
    try:
        return max(0, int(str(value)))
    except (TypeError, ValueError):
        return 0


def _is_gpu_resource(name: str) -> bool:
    return (
        name in WHOLE_GPU_RESOURCES or name in SHARED_GPU_RESOURCES or name.startswith(MIG_PREFIX)
    )


@dataclass(frozen=True)
class _Node:
    name: str
    labels: Mapping[str, str]
    capacity: Mapping[str, int]
    allocatable: Mapping[str, int]
    shared: bool
    created: dt.datetime | None = None
    ready: bool | None = None
    """The Ready condition's status (None: the node has no Ready condition to go by)."""

    def starting(self, now: dt.datetime | None, grace: dt.timedelta) -> str:
        """Why the node is not expected to have its GPUs running yet ("" when it is): it joined
        less than ``grace`` ago, or it is NotReady (its kubelet, and so the device plugin and
        exporter pods, are not running or not reporting)."""
        if self.ready is False:
            return "NotReady"
        if now is not None and self.created is not None and now - self.created < grace:
            minutes = max(0, int((now - self.created).total_seconds() // 60))
            return f"joined {minutes} min ago"
        return ""

    @property
    def product(self) -> str:
        return self.labels.get(GFD_PRODUCT) or self.labels.get(AMD_PRODUCT) or ""

    @property
    def gpus_allocatable(self) -> int:
        return sum(v for r, v in self.allocatable.items() if _is_gpu_resource(r))

    @property
    def gpus_capacity(self) -> int:
        return sum(v for r, v in self.capacity.items() if _is_gpu_resource(r))

    @property
    def mig_allocatable(self) -> dict[str, int]:
        return {r: v for r, v in self.allocatable.items() if r.startswith(MIG_PREFIX) and v}

    @property
    def mig_single(self) -> bool:
        """GFD's product names a MIG slice: strategy single with MIG on (``…-MIG-1g.10gb``)."""
        return "-MIG-" in self.product


def _created(value: Any) -> dt.datetime | None:
    """metadata.creationTimestamp (RFC 3339 text, or a datetime from a typed client)."""
    if isinstance(value, dt.datetime):
        created = value
    else:
        try:
            created = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
    return created if created.tzinfo else created.replace(tzinfo=dt.UTC)


def _ready(status: Mapping[str, Any]) -> bool | None:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return str(condition.get("status")) == "True"
    return None


def _gpu_nodes(nodes: Iterable[Mapping[str, Any]], gpu_label: str) -> list[_Node]:
    """The nodes that have GPUs or say they should: a GPU resource in capacity or allocatable,
    GPU Feature Discovery's product, count or presence labels, or the cluster's model label."""
    out = []
    for node in nodes:
        meta = node.get("metadata") or {}
        status = node.get("status") or {}
        name = str(meta.get("name") or "")
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        capacity = {str(k): _count(v) for k, v in (status.get("capacity") or {}).items()}
        allocatable = {str(k): _count(v) for k, v in (status.get("allocatable") or {}).items()}
        annotations = meta.get("annotations") or {}
        has_resource = any(_is_gpu_resource(r) for r in (*capacity, *allocatable))
        says_gpu = (
            labels.get(GPU_PRESENT) == "true"
            or bool(labels.get(GFD_PRODUCT) or labels.get(AMD_PRODUCT))
            or _count(labels.get(GPU_COUNT)) > 0
            or bool(gpu_label and labels.get(gpu_label))
        )
        if not name or not (has_resource or says_gpu):
            continue
        shared = "volcano.sh/vgpu-memory" in allocatable or "hami.io/node-nvidia-register" in (
            annotations
        )
        created = _created(meta.get("creationTimestamp"))
        out.append(_Node(name, labels, capacity, allocatable, shared, created, _ready(status)))
    return sorted(out, key=lambda n: n.name)


def _named(nodes: Sequence[str]) -> str:
    """``a100-0, a100-1`` or ``a100-0, … and 38 more``."""
    shown = ", ".join(nodes[:MAX_NODES_NAMED])
    rest = len(nodes) - MAX_NODES_NAMED
    return f"{shown} and {rest} more" if rest > 0 else shown


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _verb(count: int, singular: str, plural: str) -> str:
    return singular if count == 1 else plural


# ---------------------------------------------------------------------------------------------
# (1) GPU nodes that advertise no GPUs
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# (3) MIG
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# (4) Volcano
# ---------------------------------------------------------------------------------------------
def _plugins(conf: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    plugins: dict[str, dict[str, Any]] = {}
    for tier in conf.get("tiers") or []:
        if not isinstance(tier, Mapping):
            continue
        for plugin in tier.get("plugins") or []:
            if isinstance(plugin, Mapping) and plugin.get("name"):
                args = plugin.get("arguments") or {}
                plugins[str(plugin["name"])] = dict(args) if isinstance(args, Mapping) else {}
    return plugins


_WHERE = f"ConfigMap {VOLCANO_NAMESPACE}/{VOLCANO_CONFIGMAP}, key {VOLCANO_CONF_KEY}"


def check_volcano(volcano: VolcanoFacts) -> list[Finding]:
    """Volcano's APIs served, and its scheduler configured with what the portal's jobs need:
    the enqueue and allocate actions, gang (all replicas or none), predicates (the job's node
    selector honoured), and proportion or capacity (team queue capabilities enforced)."""
    if volcano.served is not None:
        missing = [gv for gv in VOLCANO_GROUPS if gv not in volcano.served]
        if missing:
            return [
                Finding(
                    code="volcano-missing",
                    severity=ERROR,
                    title="Volcano is not installed",
                    explanation=f"The API server does not serve {', '.join(missing)}: the "
                    "Volcano CRDs are not installed, so the portal cannot create Volcano Jobs "
                    "or team queues here and every job dispatched to this cluster fails.",
                    fix="Install Volcano (helm install volcano volcano-sh/volcano -n "
                    "volcano-system --create-namespace), then test the connection again.",
                )
            ]
    if volcano.config is None and volcano.config_problem == "forbidden":
        # deploy/rbac.yaml grants no ConfigMaps on purpose: not knowing is the expected state
        # there, so it is said (info), not raised to the admins on every cluster.
        return [
            Finding(
                code="volcano-config-forbidden",
                severity=INFO,
                title="The portal may not read the Volcano scheduler configuration",
                explanation=f"Reading {_WHERE} was refused (403): the portal's RBAC grants no "
                "ConfigMaps, so the doctor cannot check that Volcano runs the gang and "
                "predicates plugins and the allocate action the portal's jobs need.",
                fix="To let it check, grant get on that one ConfigMap: kubectl -n "
                f"{VOLCANO_NAMESPACE} create role gpupool-doctor --verb=get "
                f"--resource=configmaps --resource-name={VOLCANO_CONFIGMAP}, then kubectl -n "
                f"{VOLCANO_NAMESPACE} create rolebinding gpupool-doctor --role=gpupool-doctor "
                "--serviceaccount=gpupool-system:gpupool-portal",
            )
        ]
    if volcano.config is None:
        problem = volcano.config_problem or "not read"
        detail = ""
        if problem == "not-found":
            why = f"There is no {_WHERE}"
        elif problem == "no-key":
            why = f"{_WHERE} is missing: the ConfigMap has no such key"
        else:
            # the API server's own error text can name hosts and addresses: admins only
            why = f"Reading {_WHERE} failed (platform admins see the error)"
            detail = problem
        return [
            Finding(
                code="volcano-config-unseen",
                severity=WARNING,
                title="Cannot see the Volcano scheduler configuration",
                explanation=f"{why}. Whether Volcano schedules gangs all-or-nothing and honours "
                "the jobs' node selectors depends on it, so the doctor cannot tell whether "
                "the portal's jobs will be placed as planned.",
                fix=f"Create {_WHERE} as the Volcano Helm chart does (Volcano reads its "
                "scheduler configuration from it), or, if Volcano was installed into another "
                "namespace, make sure the portal can read it there.",
                detail=detail,
            )
        ]
    try:
        conf = yaml.safe_load(volcano.config) or {}
    except yaml.YAMLError as exc:
        conf = None
        reason = str(exc).splitlines()[0] if str(exc) else "invalid YAML"
    else:
        reason = "it is not a mapping with actions and tiers"
    if not isinstance(conf, Mapping) or not conf.get("actions"):
        return [
            Finding(
                code="volcano-config-invalid",
                severity=ERROR,
                title="The Volcano scheduler configuration cannot be read",
                explanation=f"{_WHERE} does not parse ({reason}). Volcano refuses such a "
                "configuration and keeps running with the one it had, or with none after a "
                "restart: what it does is not what the ConfigMap says.",
                fix="Restore it from the Volcano Helm chart's volcano-scheduler.conf "
                '(actions: "enqueue, allocate, backfill", tiers with priority, gang, '
                "conformance, then drf, predicates, proportion, nodeorder, binpack).",
            )
        ]
    actions = [a.strip() for a in str(conf.get("actions")).split(",") if a.strip()]
    plugins = _plugins(conf)
    findings: list[Finding] = []
    for action, severity, effect in (
        ("allocate", ERROR, "nothing is ever bound to a node: every job's pods stay Pending"),
        (
            "enqueue",
            WARNING,
            "PodGroups are admitted without the enqueue checks, so a gang the cluster cannot "
            "hold starts creating pods that then wait",
        ),
    ):
        if action not in actions:
            findings.append(
                Finding(
                    code=f"volcano-no-{action}",
                    severity=severity,
                    title=f"Volcano's scheduler does not run the {action} action",
                    explanation=f"{_WHERE} lists the actions {', '.join(actions)}; without "
                    f"{action} {effect}.",
                    fix=f"Add {action} to actions (the chart's default is "
                    '"enqueue, allocate, backfill") and save the ConfigMap; Volcano re-reads it.',
                )
            )
    for plugin, severity, effect in (
        (
            "gang",
            ERROR,
            "a multi-node job's replicas are bound one by one as they fit instead of all "
            "together, so half a gang can start, hold its GPUs and wait for the rest forever",
        ),
        (
            "predicates",
            ERROR,
            "node selectors, node affinity, taints and cordons are not checked, so a job "
            "meant for one GPU model lands on any node with a free GPU",
        ),
    ):
        if plugin not in plugins:
            findings.append(
                Finding(
                    code=f"volcano-no-{plugin}",
                    severity=severity,
                    title=f"Volcano's scheduler runs without the {plugin} plugin",
                    explanation=f"{_WHERE} enables no {plugin} plugin in any tier: {effect}.",
                    fix=f"Add '- name: {plugin}' to a tier's plugins (the chart has gang in "
                    "the first tier and predicates in the second) and save the ConfigMap.",
                )
            )
    predicates = plugins.get("predicates")
    if predicates is not None and (
        str(predicates.get("predicate.NodeAffinityEnable", True)).lower() == "false"
    ):
        findings.append(
            Finding(
                code="volcano-no-node-affinity",
                severity=ERROR,
                title="Volcano's predicates ignore node selectors",
                explanation=f"{_WHERE} sets predicate.NodeAffinityEnable: false, so the "
                "nodeSelector and node affinity the portal puts on every job (the GPU model "
                "it chose) are not honoured: jobs land on nodes of other models.",
                fix="Remove predicate.NodeAffinityEnable from the predicates plugin's "
                "arguments (it defaults to true).",
            )
        )
    if "proportion" not in plugins and "capacity" not in plugins:
        findings.append(
            Finding(
                code="volcano-no-queue-limits",
                severity=WARNING,
                title="Volcano enforces no queue capabilities",
                explanation=f"{_WHERE} enables neither proportion nor capacity, so the "
                "capability the portal gives each team's Volcano queue (its quota) is not "
                "enforced on the cluster. The portal's own admission still keeps teams within "
                "their quotas, but jobs submitted around the portal are not held back.",
                fix="Add '- name: proportion' (or capacity) to the second tier's plugins.",
            )
        )
    return findings


# ---------------------------------------------------------------------------------------------
# (5) DCGM metrics
# ---------------------------------------------------------------------------------------------
def check_dcgm(
    dcgm: DcgmFacts | None,
    nodes: Iterable[Mapping[str, Any]],
    *,
    gpu_label: str,
    now: dt.datetime | None = None,
    grace: dt.timedelta = NEW_NODE_GRACE,
) -> list[Finding]:
    """Where a Prometheus URL is set: Prometheus answers, and it has DCGM exporter series for
    the cluster's GPU nodes (else the utilization pages and idle detection have nothing).
    Nodes still starting (younger than ``grace``, or NotReady) are not expected to report yet:
    the exporter starts after the driver and Prometheus scrapes it a minute later."""
    if dcgm is None or not dcgm.configured:
        return []
    if dcgm.error:
        return [
            Finding(
                code="dcgm-prometheus-unreadable",
                severity=WARNING,
                title="The cluster's Prometheus cannot be read",
                # Prometheus's error can name its host, a private address, or its own
                # internals: the explanation says what it means, the detail (admins) says how.
                explanation="Asking the cluster's Prometheus for DCGM metrics failed (platform "
                "admins see the error). GPU utilization and idle-job detection show nothing "
                "for this cluster.",
                fix="Check the cluster's Prometheus URL (it must reach the Prometheus HTTP API "
                "from the portal) and that Prometheus is up.",
                detail=dcgm.error,
            )
        ]
    gpu_nodes = [n for n in _gpu_nodes(nodes, gpu_label) if n.gpus_allocatable or n.gpus_capacity]
    settled = [n for n in gpu_nodes if not n.starting(now, grace)]
    if gpu_nodes and not settled:
        return []  # every GPU node is still starting: no exporter is expected to report yet
    gpu_nodes = settled
    if dcgm.series == 0:
        return [
            Finding(
                code="dcgm-no-data",
                severity=WARNING,
                title="Prometheus has no DCGM exporter data",
                explanation="A Prometheus URL is set for this cluster, but Prometheus holds no "
                "DCGM_FI_DEV_GPU_UTIL or DCGM_FI_PROF_GR_ENGINE_ACTIVE series: the DCGM "
                "exporter is not running, or Prometheus does not scrape it. GPU utilization "
                "and idle-job detection show nothing for this cluster.",
                fix="Check the exporter (kubectl get pods -n gpu-operator -l "
                "app=nvidia-dcgm-exporter) and that Prometheus scrapes it (its ServiceMonitor "
                "needs the Prometheus operator's label selector; serviceMonitor.enabled=true "
                "in the GPU Operator's dcgmExporter values).",
                nodes=tuple(n.name for n in gpu_nodes),
            )
        ]
    if not dcgm.hosts:
        return []  # series without a host label: cannot tell nodes apart, nothing to say
    silent = [n.name for n in gpu_nodes if n.name not in dcgm.hosts]
    if not silent:
        return []
    return [
        Finding(
            code="dcgm-nodes-silent",
            severity=WARNING,
            title=f"{_plural(len(silent), 'GPU node')} "
            f"{_verb(len(silent), 'reports', 'report')} no DCGM metrics: {_named(silent)}",
            explanation="Prometheus has DCGM series for other nodes of this cluster but none "
            "for these: their DCGM exporter pod is not running (often a missing toleration "
            "or node selector), so jobs there show no GPU utilization.",
            fix="kubectl get pods -n gpu-operator -o wide -l app=nvidia-dcgm-exporter: "
            "find why no exporter runs on these nodes (taints, node selector, a crash).",
            nodes=tuple(silent),
        )
    ]


# ---------------------------------------------------------------------------------------------
# All of it
# ---------------------------------------------------------------------------------------------
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
