"""What the doctor's rules read and what they return: the severities, the labels and
resource names they look for, the inputs (:class:`CatalogFacts`, :class:`VolcanoFacts`,
:class:`DcgmFacts`) and the :class:`Finding` every rule hands back."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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
    as ``clusters.nodes.Catalog``: the cluster's label names a key or a product label,
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
