"""Rule (4): Volcano, served and configured with what the portal's jobs need (the scheduler
ConfigMap's actions and plugins)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from clusters.doctor.facts import (
    ERROR,
    INFO,
    VOLCANO_CONF_KEY,
    VOLCANO_CONFIGMAP,
    VOLCANO_GROUPS,
    VOLCANO_NAMESPACE,
    WARNING,
    Finding,
    VolcanoFacts,
)


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
