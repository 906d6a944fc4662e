"""The Volcano scheduler's configuration: ``volcano-system/volcano-scheduler-configmap``.

A real Volcano scheduler mounts this ConfigMap and re-reads ``volcano-scheduler.conf`` when it
changes: ``actions`` is the pipeline run every session, ``tiers`` the plugins that vote in it.
kubesim's scheduler reads the same object, so editing it (``kubectl edit cm ...``) changes what
the simulated Volcano does, and a misconfiguration shows the failure a real cluster shows:

* ``gang`` missing: a job's pods are bound one by one as they fit, not all or nothing.
* ``predicates`` missing: nodeSelector, required node affinity, taints and cordons are not
  checked (resources still are: the allocate action checks them itself), so a
  ``nodeSelector: {gpu-type: a100}`` lands on any node with a free GPU.
  ``predicate.NodeAffinityEnable: false`` switches off the selector/affinity part only.
* ``proportion`` and ``capacity`` both missing: queue capabilities and queue state are not
  enforced.
* ``overcommit`` missing: enqueue no longer holds back gangs the cluster cannot hold.
* ``binpack`` missing: pods spread to the node with the most free GPUs (nodeorder's
  least-requested score) instead of filling one node before the next.
* ``enqueue`` action missing: PodGroups go to Inqueue without the enqueue checks (allocate
  takes pending jobs itself, as Volcano does when enqueue is not configured).
* ``allocate`` action missing: nothing is bound; pods stay Pending.

``priority``, ``conformance``, ``drf`` and ``nodeorder`` are accepted and change nothing kubesim
models. Like the real scheduler, a configuration that cannot be parsed or names an unknown
action is rejected and the previous one stays in force; an unknown plugin is skipped.

This module is pure: parsing and the questions the scheduler asks, no store, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

NAMESPACE = "volcano-system"
CONFIGMAP = "volcano-scheduler-configmap"
CONF_KEY = "volcano-scheduler.conf"

# The scheduler configuration Volcano's Helm chart installs (installer/helm/chart/volcano/
# config/volcano-scheduler.conf); kubesim's behaviour before it read any configuration.
DEFAULT_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""

KNOWN_ACTIONS = frozenset({"enqueue", "allocate", "backfill", "preempt", "reclaim", "shuffle"})
KNOWN_PLUGINS = frozenset(
    {
        "binpack",
        "capacity",
        "cdp",
        "conformance",
        "deviceshare",
        "drf",
        "extender",
        "gang",
        "nodegroup",
        "nodeorder",
        "numaaware",
        "overcommit",
        "pdb",
        "predicates",
        "priority",
        "proportion",
        "rescheduling",
        "resource-strategy-fit",
        "resourcequota",
        "sla",
        "task-topology",
        "tdm",
        "usage",
    }
)


class ConfError(ValueError):
    """A configuration the scheduler refuses (it keeps the previous one)."""


@dataclass(frozen=True)
class SchedulerConf:
    """The parsed ``volcano-scheduler.conf``: actions in order, enabled plugins with arguments."""

    actions: tuple[str, ...]
    plugins: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()
    """Plugin names the scheduler does not know (ignored, as Volcano logs and skips them)."""

    def has(self, plugin: str) -> bool:
        """Whether ``plugin`` is enabled in some tier."""
        return plugin in self.plugins

    @property
    def enqueue(self) -> bool:
        """Whether the enqueue action runs (else pending PodGroups go straight to Inqueue)."""
        return "enqueue" in self.actions

    @property
    def allocate(self) -> bool:
        """Whether pods are bound at all (allocate; backfill alone binds only best-effort pods)."""
        return "allocate" in self.actions

    @property
    def gang(self) -> bool:
        """All-or-nothing placement of a job's minAvailable pods."""
        return self.has("gang")

    @property
    def predicates(self) -> bool:
        """Node predicates: cordon, taints, nodeSelector and node affinity."""
        return self.has("predicates")

    @property
    def node_affinity(self) -> bool:
        """The selector/affinity part of predicates (``predicate.NodeAffinityEnable``)."""
        if not self.predicates:
            return False
        value = (self.plugins.get("predicates") or {}).get("predicate.NodeAffinityEnable", True)
        return str(value).lower() != "false"

    @property
    def queue_capacity(self) -> bool:
        """Queue capability and state enforced (the proportion or capacity plugin)."""
        return self.has("proportion") or self.has("capacity")

    @property
    def overcommit(self) -> bool:
        """Enqueue checks the cluster's idle resources times the overcommit factor."""
        return self.has("overcommit")

    @property
    def binpack(self) -> bool:
        """Fill nodes before starting new ones (else spread to the least requested node)."""
        return self.has("binpack")


def parse_conf(text: str) -> SchedulerConf:
    """Parse ``volcano-scheduler.conf``; :class:`ConfError` says what is wrong."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfError(f"cannot parse {CONF_KEY}: {exc}") from exc
    if not isinstance(doc, dict):
        raise ConfError(f"{CONF_KEY} must be a mapping with 'actions' and 'tiers'")
    raw_actions = doc.get("actions")
    if not isinstance(raw_actions, str) or not raw_actions.strip():
        raise ConfError(f"{CONF_KEY}: 'actions' must be a comma-separated string")
    actions = tuple(a.strip() for a in raw_actions.split(",") if a.strip())
    for action in actions:
        if action not in KNOWN_ACTIONS:
            raise ConfError(f"failed to find Action {action}, ignore it")
    tiers = doc.get("tiers") or []
    if not isinstance(tiers, list):
        raise ConfError(f"{CONF_KEY}: 'tiers' must be a list")
    plugins: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    for tier in tiers:
        entries = (tier or {}).get("plugins") if isinstance(tier, dict) else None
        if not isinstance(entries, list):
            raise ConfError(f"{CONF_KEY}: each tier must have a 'plugins' list")
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ConfError(f"{CONF_KEY}: each plugin must have a 'name'")
            name = entry["name"].strip()
            if name not in KNOWN_PLUGINS:
                skipped.append(name)
                continue
            arguments = entry.get("arguments") or {}
            if not isinstance(arguments, dict):
                raise ConfError(f"{CONF_KEY}: arguments of plugin {name} must be a mapping")
            plugins[name] = dict(arguments)
    return SchedulerConf(actions, plugins, tuple(skipped))


DEFAULT = parse_conf(DEFAULT_CONF)


def configmap(text: str = DEFAULT_CONF) -> dict[str, Any]:
    """The ConfigMap Volcano's installer creates, holding ``text``."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP, "namespace": NAMESPACE},
        "data": {CONF_KEY: text},
    }
