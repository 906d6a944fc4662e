"""One Volcano Queue per team the scheduler may admit on a cluster, kept in line with quotas.

The portal does admission itself, so the queues are a second line: Volcano's proportion plugin
shares what is left by weight, and ``capability`` stops a team's jobs from ever exceeding its
quota plus borrowing limit on this cluster, even if the portal were wrong. A sync:

1. computes the desired queues from plain values (:func:`queues_desired`: team slug → weight
   and capability), with the engine's own rule of what a team could be given
   (:func:`rules.engine.quota_reach`: nominal, or borrowing from its cohort, a team
   without a quota row included), so every team the engine may admit here has its queue;
2. lists the portal's queues (label ``app.kubernetes.io/managed-by=gpupool``) and applies
   (server-side apply, one fixed field manager, forced) each desired queue whose spec
   differs: a first sync creates them, a later one corrects drift (someone edited a weight
   with kubectl), an unchanged queue costs no write;
3. makes the job namespaces of those teams where the cluster lacks them (a cluster whose API
   server restarted empty lost its namespaces with its queues);
4. closes queues of teams that lost their quota: capability drops to zero (so nothing new can
   run there even before Volcano's controller acts) and a ``CloseQueue`` Command is created;
   a team that regains quota gets its queue reopened with ``OpenQueue``.

Queue *state* lives in ``status.state`` and only Commands change it (see ``rules.volcano``):
Volcano's queue controller consumes the Command and moves the queue to ``Closing`` while
PodGroups remain in it, ``Closed`` once none do, or back to ``Open``. A sync issues a Command
only while the state is not yet what it wants, under a name fixed per queue and action, so
repeated syncs never pile Commands up. Where the cluster does not serve ``bus.volcano.sh``
Commands the capability-zero part still holds and the sync records why the state could not
change.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from clusters.clients import (
    ClusterUnavailable,
    cluster_client,
    cluster_job_namespaces,
    job_namespace_ensure,
)
from clusters.kube import FIELD_MANAGER, KubeClient, KubeError
from clusters.models import Cluster, Node
from portal.models import Team
from rules import engine, volcano
from rules.capacity import pool_capacity
from scheduling.models import DEFAULT_COHORT_SLUG, CohortQuota, Quota, TeamPolicy

log = logging.getLogger(__name__)

__all__ = [
    "QueueSyncResult",
    "TeamQueue",
    "queues_desired",
    "queues_desired_for_cluster",
    "queues_sync",
    "volcano_weight",
]

WEIGHT_SCALE = 100  # TeamPolicy.weight is a float >= 0.01; Volcano's weight an int 1..65535


@dataclass(frozen=True)
class TeamQueue:
    """What one team's queue on one cluster should say."""

    team_slug: str
    weight: int
    capability: Mapping[str, int]

    @property
    def name(self) -> str:
        return volcano.volcano_queue_name(self.team_slug)

    def manifest(self) -> dict[str, Any]:
        return volcano.build_volcano_queue(
            self.name,
            self.weight,
            dict(self.capability),
            labels={volcano.LABEL_TEAM: volcano.label_value(self.team_slug)},
        )


def volcano_weight(weight: float) -> int:
    """A fair-share weight as Volcano's integer weight (ratios kept, 1..65535)."""
    return max(1, min(65535, round(weight * WEIGHT_SCALE)))


QuotaLine = tuple[str, str, int, int | None] | tuple[str, str, int, int | None, int | None]


def queues_desired(
    *,
    weights: Mapping[str, float],
    quotas: Iterable[QuotaLine],
    cluster_gpus: Mapping[str, tuple[str, int]],
    cohorts: Mapping[str, str] | None = None,
    cohort_quotas: Iterable[tuple[str, str, int]] = (),
) -> list[TeamQueue]:
    """The queues a cluster should have, from plain values.

    ``weights``: team slug → fair-share weight (teams without one get 1.0).
    ``quotas``: (team slug, model key, nominal, borrowing limit or None = unlimited[, lending
    limit or None = all]).
    ``cluster_gpus``: model key → (resource name, allocatable GPUs on this cluster).
    ``cohorts``: every team → its cohort slug, teams without a quota row included (they may
    borrow); None = only the teams of ``quotas``, all in one cohort.
    ``cohort_quotas``: (cohort slug, model key, GPUs the cohort owns).

    A team has a queue exactly when the engine could admit it on this cluster: when, for some
    model the cluster has, :func:`rules.engine.quota_reach` (its nominal plus what its
    cohort could lend it, within its borrowing limit) is above 0. Capability per resource is the
    sum over those models of min(reach, what the cluster has). Models sharing one resource
    (``nvidia.com/gpu`` for A100 and T4) add up, since Volcano only sees resource names.
    """
    lines = [
        engine.Quota(
            team=line[0],
            model=line[1],
            nominal=line[2],
            borrowing_limit=line[3],
            lending_limit=line[4] if len(line) > 4 else None,  # type: ignore[misc]
        )
        for line in quotas
    ]
    reach = engine.quota_reach(
        teams=cohorts if cohorts is not None else {},
        quotas=lines,
        cohort_quotas=[
            engine.CohortQuota(cohort=c, model=m, nominal=n) for c, m, n in cohort_quotas
        ],
    )
    capability: dict[str, dict[str, int]] = {}
    for (slug, model), gpus in sorted(reach.items()):
        if model not in cluster_gpus:
            continue
        resource, available = cluster_gpus[model]
        wanted = min(available, gpus)
        if wanted <= 0:
            continue
        if resource == volcano.HAMI_MEMORY:
            # HAMi's shares are bound by hami-scheduler: Volcano's queues never see them. The
            # team still needs its queue: Volcano's admission refuses a Job naming none.
            capability.setdefault(slug, {})
            continue
        if resource == volcano.VGPU_MEMORY:
            wanted *= 1024  # a shared pool counts GiB; Volcano counts vgpu-memory in MiB
        team = capability.setdefault(slug, {})
        team[resource] = team.get(resource, 0) + wanted
    return [
        TeamQueue(slug, volcano_weight(weights.get(slug, 1.0)), dict(sorted(caps.items())))
        for slug, caps in sorted(capability.items())
    ]


def queues_desired_for_cluster(cluster: Cluster) -> list[TeamQueue]:
    """:func:`queues_desired` fed from teams, TeamPolicy, Quota, CohortQuota and the
    cluster's inventory: the same quota rows, in the same cohorts, the cycle gives the engine."""
    resources: dict[str, str] = {}
    allocatable: dict[str, list[int]] = defaultdict(list)
    rows = Node.objects.filter(
        cluster=cluster, gpu_model__isnull=False, gpu_model__active=True
    ).values_list("gpu_model__key", "gpu_resource", "gpu_allocatable")
    for key, resource, gpus_here in rows:
        resources.setdefault(key, resource)
        allocatable[key].append(gpus_here)
    gpus = {key: (resources[key], pool_capacity(allocatable[key])) for key in resources}
    policies = TeamPolicy.objects.values_list("team__slug", "weight", "cohort__slug")
    weights = {slug: weight for slug, weight, _ in policies}
    cohorts = dict.fromkeys(Team.objects.values_list("slug", flat=True), DEFAULT_COHORT_SLUG)
    cohorts.update({slug: cohort for slug, _, cohort in policies if cohort})
    quotas = Quota.objects.filter(gpu_model__active=True).values_list(
        "team__slug", "gpu_model__key", "nominal", "borrowing_limit", "lending_limit"
    )
    owned = CohortQuota.objects.filter(gpu_model__active=True).values_list(
        "cohort__slug", "gpu_model__key", "nominal"
    )
    return queues_desired(
        weights=weights, quotas=quotas, cluster_gpus=gpus, cohorts=cohorts, cohort_quotas=owned
    )


@dataclass
class QueueSyncResult:
    ok: bool = True
    applied: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    opened: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        parts = [
            f"{len(self.applied)} applied",
            f"{len(self.unchanged)} unchanged",
            f"{len(self.closed)} closed",
            f"{len(self.opened)} reopened",
        ]
        return ", ".join(parts) + (f"; {'; '.join(self.problems)}" if self.problems else "")


def _spec_matches(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    spec = current.get("spec") or {}
    want = desired["spec"]
    caps = {k: str(v) for k, v in (spec.get("capability") or {}).items()}
    return (
        spec.get("weight") == want["weight"]
        and caps == {k: str(v) for k, v in want["capability"].items()}
        and spec.get("reclaimable", True) == want["reclaimable"]
        and ((current.get("metadata") or {}).get("labels") or {}).items()
        >= desired["metadata"]["labels"].items()
    )


def _state(queue: dict[str, Any]) -> str:
    return str((queue.get("status") or {}).get("state") or "Open")


def _command(
    client: KubeClient, cluster: Cluster, queue: dict[str, Any], action: volcano.QueueAction
) -> str | None:
    """Issue an Open/CloseQueue Command; returns a problem in words, or None.

    The name is fixed per queue (its uid) and action, so a sync that runs again before
    Volcano's queue controller has consumed the Command (it deletes each one it acts on)
    meets AlreadyExists instead of piling up a second Command.
    """
    name = queue["metadata"]["name"]
    uid = str(queue["metadata"].get("uid") or "")
    verb = "close" if action == "CloseQueue" else "open"
    manifest = volcano.build_queue_command(
        queue_name=name,
        queue_uid=uid,
        action=action,
        namespace=cluster.command_namespace,
        name=_command_name(name, verb, uid),
    )
    try:
        client.create_command(cluster.command_namespace, manifest)
    except KubeError as exc:
        if exc.already_exists:
            return None  # the same request is still waiting for Volcano
        if exc.not_found:
            return f"cannot {verb} {name}: the cluster does not serve Volcano Commands"
        return f"cannot {verb} {name}: {exc.message}"
    return None


def _command_name(queue: str, verb: str, uid: str) -> str:
    """``<queue>-<verb>-<8 hex of a hash of the queue's uid>``, within 253 characters."""
    suffix = f"-{verb}-{hashlib.sha256(uid.encode()).hexdigest()[:8]}"
    return queue[: 253 - len(suffix)].rstrip("-.") + suffix


def queues_sync(*, cluster: Cluster, desired: list[TeamQueue] | None = None) -> QueueSyncResult:
    """Make the cluster's portal queues match ``desired`` (default: from the quota models)."""
    result = QueueSyncResult()
    if desired is None:
        desired = queues_desired_for_cluster(cluster)
    try:
        client = cluster_client(cluster)
        existing = {
            q["metadata"]["name"]: q
            for q in client.list_queues(label_selector=volcano.managed_selector())
        }
    except (ClusterUnavailable, KubeError) as exc:
        message = exc.message if isinstance(exc, KubeError) else str(exc)
        Cluster.objects.filter(pk=cluster.pk).update(queues_error=message[:2000])
        return QueueSyncResult(ok=False, problems=[message])
    wanted = {q.name: q for q in desired}
    for name, queue in wanted.items():
        manifest = queue.manifest()
        current = existing.get(name)
        try:
            if current is None or not _spec_matches(current, manifest):
                current = client.apply_queue(manifest, field_manager=FIELD_MANAGER)
                result.applied.append(name)
            else:
                result.unchanged.append(name)
        except KubeError as exc:
            result.ok = False
            result.problems.append(exc.message)
            continue
        if _state(current) in ("Closed", "Closing"):
            problem = _command(client, cluster, current, "OpenQueue")
            (result.problems.append(problem) if problem else result.opened.append(name))
    for name, current in existing.items():
        if name in wanted:
            continue
        team = ((current.get("metadata") or {}).get("labels") or {}).get(volcano.LABEL_TEAM, "")
        zero = {r: 0 for r in ((current.get("spec") or {}).get("capability") or {})}
        closing = volcano.build_volcano_queue(
            name,
            int((current.get("spec") or {}).get("weight") or 1),
            zero or {"nvidia.com/gpu": 0},
            labels={volcano.LABEL_TEAM: team} if team else None,
        )
        try:
            if not _spec_matches(current, closing):
                current = client.apply_queue(closing, field_manager=FIELD_MANAGER)
        except KubeError as exc:
            result.ok = False
            result.problems.append(exc.message)
            continue
        if _state(current) not in ("Closed", "Closing"):
            problem = _command(client, cluster, current, "CloseQueue")
            if problem:
                result.problems.append(problem)
        result.closed.append(name)
    for namespace in cluster_job_namespaces(cluster, [q.team_slug for q in desired]):
        problem = job_namespace_ensure(client, namespace)
        if problem:
            result.problems.append(problem)
    Cluster.objects.filter(pk=cluster.pk).update(
        queues_synced_at=timezone.now(), queues_error="; ".join(result.problems)[:2000]
    )
    log.info("queues of %s: %s", cluster.name, result.message)
    return result
