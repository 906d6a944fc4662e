"""Running the cluster doctor (:mod:`clusters.doctor`) on a registered cluster: fetch, check,
store, tell.

(1) Fetch what the rules read: the nodes (the inventory sync passes the list it just read),
the API groups and Volcano's scheduler ConfigMap through the kube adapter, the catalog from
the database, and, where a Prometheus URL is set, which nodes have DCGM series (asked of the
dashboards room through ``portal.hooks.dcgm_presence``: clusters never imports it).
(2) :func:`clusters.doctor.diagnose`, pure. (3) Replace the cluster's ``ClusterFinding`` rows
under a lock on the cluster row, so two checks at once (the periodic sync and an admin's
"Check now") never both take the same finding for new. (4) On commit, fire
``portal.hooks.cluster_findings`` with the findings that are new: a key not seen in the
previous check nor in the last hour, or one that now concerns a node it did not concern in
the previous check nor in the last hour. Info findings are stored and shown but told to nobody.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from clusters.clients import ClusterUnavailable, cluster_client
from clusters.doctor import (
    INFO,
    SEVERITIES,
    VOLCANO_CONF_KEY,
    VOLCANO_CONFIGMAP,
    VOLCANO_NAMESPACE,
    CatalogFacts,
    DcgmFacts,
    Finding,
    ModelFacts,
    VolcanoFacts,
    diagnose,
)
from clusters.kube import KubeClient, KubeError
from clusters.models import Cluster, ClusterFinding
from portal import hooks
from scheduling.models import GpuModel

log = logging.getLogger(__name__)

__all__ = ["CheckupResult", "catalog_facts", "cluster_checkup", "findings_store"]


@dataclass
class CheckupResult:
    """What one check found (``ok`` false: the cluster could not be read, nothing stored), and
    the keys of what was news."""

    ok: bool
    message: str
    findings: list[Finding] = field(default_factory=list)
    new: list[str] = field(default_factory=list)


def catalog_facts() -> CatalogFacts:
    """The catalog as the rules read it (one query)."""
    return CatalogFacts(
        [
            ModelFacts(
                key=key,
                product_labels=tuple(str(label) for label in labels or []),
                resource_name=resource,
                shared=shares is not None,
            )
            for key, labels, resource, shares in GpuModel.objects.values_list(
                "key", "product_labels", "resource_name", "shares_id"
            )
        ]
    )


def _volcano_facts(client: KubeClient) -> VolcanoFacts:
    try:
        served: frozenset[str] | None = frozenset(client.api_group_versions())
    except KubeError as exc:
        if exc.cluster_unreachable:
            raise
        served = None
    try:
        cm = client.read_config_map(VOLCANO_NAMESPACE, VOLCANO_CONFIGMAP)
    except KubeError as exc:
        if exc.cluster_unreachable:
            raise
        problem = "not-found" if exc.not_found else exc.message
        if exc.status == 403:
            problem = "forbidden"
        return VolcanoFacts(served=served, config=None, config_problem=problem)
    data = cm.get("data") or {}
    text = data.get(VOLCANO_CONF_KEY)
    if text is None:
        return VolcanoFacts(served=served, config=None, config_problem="no-key")
    return VolcanoFacts(served=served, config=str(text))


def _dcgm_facts(cluster: Cluster) -> DcgmFacts | None:
    """None without a Prometheus URL, or while no room answers the question."""
    if not cluster.prometheus_url:
        return None
    answer = hooks.dcgm_presence.ask(cluster)
    if not isinstance(answer, Mapping):
        return None
    return DcgmFacts(
        configured=True,
        error=str(answer.get("error") or ""),
        hosts=frozenset(str(h) for h in answer.get("hosts") or ()),
        series=int(answer.get("series") or 0),
    )


QUIET_AFTER_FIX = dt.timedelta(hours=1)
"""A node that a finding concerned less than this long ago is not news again for it: a
Prometheus that answers every other minute, a label flipped back and forth, or two nodes whose
device plugins crash in turn ({a}, {b}, {a}, …) would otherwise send the admins a notice a
minute."""


def _reported_cache_key(cluster_pk: int, key: str) -> str:
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]  # label values may hold anything
    return f"clusters:doctor:reported:{cluster_pk}:{digest}"


def _recent(entry: Any, now: dt.datetime) -> tuple[bool, dict[str, str]]:
    """From a cache entry: whether the finding was seen within :data:`QUIET_AFTER_FIX`, and
    the nodes it concerned within it (node -> when last seen, ISO text)."""
    if not isinstance(entry, dict):
        return False, {}

    def fresh(at: Any) -> bool:
        try:
            return now - dt.datetime.fromisoformat(str(at)) < QUIET_AFTER_FIX
        except (TypeError, ValueError):
            return False

    nodes = entry.get("nodes")
    nodes = nodes if isinstance(nodes, dict) else {}
    return fresh(entry.get("at")), {str(n): str(at) for n, at in nodes.items() if fresh(at)}


def findings_store(
    cluster: Cluster, findings: Sequence[Finding], *, now: dt.datetime | None = None
) -> list[str]:
    """Replace the cluster's findings; the keys of those that are news (see the module).

    News: an error or warning that neither the previous check nor any check of the last
    :data:`QUIET_AFTER_FIX` had, or that now concerns a node that neither the previous check
    nor any of the last :data:`QUIET_AFTER_FIX` named for it. The previous check is the rows;
    the hour before is the cache (when each finding and each of its nodes was last seen): a
    hint, so at worst, with Redis lost, one notice too many.
    """
    now = now or timezone.now()
    with transaction.atomic():
        # The row lock serialises checks of one cluster: the second reads what the first wrote.
        Cluster.objects.select_for_update().filter(pk=cluster.pk).values_list("pk").first()
        before = {
            key: (first, set(nodes or []))
            for key, first, nodes in ClusterFinding.objects.filter(cluster=cluster).values_list(
                "key", "first_seen_at", "nodes"
            )
        }
        ClusterFinding.objects.filter(cluster=cluster).delete()
        ClusterFinding.objects.bulk_create(
            [
                ClusterFinding(
                    cluster=cluster,
                    key=f.key[:255],
                    code=f.code,
                    severity=f.severity,
                    rank=SEVERITIES.index(f.severity),
                    title=f.title[:500],
                    explanation=f.explanation,
                    fix=f.fix,
                    detail=f.detail,
                    nodes=list(f.nodes),
                    first_seen_at=before.get(f.key[:255], (now, set()))[0],
                    seen_at=now,
                )
                for f in findings
            ]
        )
        Cluster.objects.filter(pk=cluster.pk).update(doctor_checked_at=now)
        cache_keys = {
            f.key[:255]: _reported_cache_key(cluster.pk, f.key[:255])
            for f in findings
            if f.severity != INFO
        }
        seen = cache.get_many(list(cache_keys.values()))
        new = []
        remember: dict[str, dict[str, Any]] = {}
        for f in findings:
            key = f.key[:255]
            if f.severity == INFO:
                continue
            recently, recent_nodes = _recent(seen.get(cache_keys[key]), now)
            known = key in before or recently
            known_nodes = (before[key][1] if key in before else set()) | set(recent_nodes)
            if not known or not set(f.nodes) <= known_nodes:
                new.append(key)  # a finding not seen lately, or on a node it did not concern
            stamp = now.isoformat()
            remember[cache_keys[key]] = {
                "at": stamp,
                "nodes": {**recent_nodes, **dict.fromkeys(f.nodes, stamp)},
            }
        if new:
            hooks.cluster_findings.fire_on_commit(cluster.pk, new)
    if remember:
        cache.set_many(remember, timeout=int(QUIET_AFTER_FIX.total_seconds()) * 2)
    cluster.doctor_checked_at = now
    return new


def cluster_checkup(
    *,
    cluster: Cluster,
    client: KubeClient | None = None,
    nodes: Sequence[Mapping[str, Any]] | None = None,
    now: dt.datetime | None = None,
) -> CheckupResult:
    """Check the cluster now and store what was found. An unreachable cluster keeps the findings
    of the last check (the result says why nothing new was learned)."""
    try:
        client = client or cluster_client(cluster)
        if nodes is None:
            nodes = client.list_nodes()
        volcano = _volcano_facts(client)
    except (ClusterUnavailable, KubeError) as exc:
        message = exc.message if isinstance(exc, KubeError) else str(exc)
        log.warning("cluster doctor: %s cannot be read: %s", cluster.name, message)
        return CheckupResult(False, f"The cluster cannot be read: {message}")
    now = now or timezone.now()
    findings = diagnose(
        nodes=nodes,
        catalog=catalog_facts(),
        gpu_label=cluster.gpu_label,
        volcano=volcano,
        dcgm=_dcgm_facts(cluster),
        now=now,
        grace=dt.timedelta(seconds=settings.GPUPOOL_DOCTOR_NODE_GRACE_SECONDS),
    )
    new = findings_store(cluster, findings, now=now)
    counts = {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES}
    message = (
        ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n)
        or "nothing found"
    )
    return CheckupResult(True, message, list(findings), new)
