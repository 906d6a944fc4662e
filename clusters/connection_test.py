"""The "Test connection" check: each step of reaching a cluster, in words an admin can act on.

One report for the admin, the staff page, the REST API and ``manage.py test_cluster``: the
address, TLS, the credentials, Volcano's APIs, the job namespaces, every verb the portal needs
(``deploy/rbac.yaml`` grants exactly :data:`_NEEDED`) and the optional queue commands, in that
order, since each step assumes the one before worked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from clusters.clients import ClusterUnavailable, cluster_client, cluster_job_namespaces
from clusters.kube import (
    RBAC_INGRESSES,
    RBAC_JOBS,
    RBAC_PODGROUPS,
    RBAC_QUEUES,
    KubeClient,
    KubeError,
)
from clusters.models import Cluster
from portal.models import Team
from rules import volcano


@dataclass
class Check:
    name: str
    ok: bool
    message: str


@dataclass
class ConnectionReport:
    """The outcome of "Test connection", in words an admin can act on."""

    ok: bool
    summary: str
    checks: list[Check] = field(default_factory=list)
    version: str = ""
    node_count: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "summary": self.summary,
            "version": self.version,
            "node_count": self.node_count,
            "checks": [{"name": c.name, "ok": c.ok, "message": c.message} for c in self.checks],
        }


@dataclass(frozen=True)
class Need:
    """One verb the portal uses on a cluster: what a 403 in the report names, and why."""

    what: str  # in words: "Volcano Jobs"
    resource: str  # as RBAC names it: "jobs.batch.volcano.sh", "pods/log"
    verb: str
    why: str
    namespaced: bool  # probed in the job namespace; else cluster-wide, as the portal asks


# Everything the portal asks of a cluster (deploy/rbac.yaml grants exactly this; nodes "list"
# is step 2 of the test). Lists and watches are cluster-wide because the inventory, the status
# reconcile and the watchers read every job namespace at once.
_NEEDED = (
    Need("Volcano Jobs", RBAC_JOBS, "create", "dispatching jobs", True),
    Need("Volcano Jobs", RBAC_JOBS, "get", "adopting a job after a retried create", True),
    Need("Volcano Jobs", RBAC_JOBS, "list", "the job status reconcile", False),
    Need("Volcano Jobs", RBAC_JOBS, "watch", "following job status as it changes", False),
    Need("Volcano Jobs", RBAC_JOBS, "delete", "cancelling and preempting jobs", True),
    Need("pods", "pods", "get", "replica state", True),
    Need("pods", "pods", "list", "replica state and the GPU inventory", False),
    Need("pods", "pods", "watch", "pod reasons within seconds", False),
    Need("pod logs", "pods/log", "get", "showing logs", True),
    Need("events", "events", "list", "pod-level reasons", True),
    Need("PodGroups", RBAC_PODGROUPS, "get", "why a gang is not scheduled", True),
    Need("PodGroups", RBAC_PODGROUPS, "list", "pending reasons in bulk", False),
    Need("Volcano Queues", RBAC_QUEUES, "get", "queue drift", False),
    Need("Volcano Queues", RBAC_QUEUES, "list", "queue sync", False),
    Need("Volcano Queues", RBAC_QUEUES, "create", "creating a team's queue", False),
    Need("Volcano Queues", RBAC_QUEUES, "patch", "keeping team queues (server-side apply)", False),
    Need("Services", "services", "create", "an inference job's endpoint", True),
    Need("Services", "services", "delete", "ending an inference job's endpoint", True),
    Need("Ingresses", RBAC_INGRESSES, "create", "an inference job's Ingress", True),
    Need("Ingresses", RBAC_INGRESSES, "delete", "ending an inference job's Ingress", True),
    Need("nodes", "nodes", "get", "the GPU inventory", False),
    Need("nodes", "nodes", "watch", "the GPU inventory", False),
)


def _forbidden(client: KubeClient, ns: str) -> list[tuple[Need, str]]:
    """The needs answered 403, each with its words; KubeError when the cluster stops answering.

    A probe passes unless the answer is 403: authorization runs before everything else on an
    API server, so a 404 for a name that does not exist, or an admission error on a dry run,
    proves the verb. Every need is asked, so one test lists every missing grant.
    """
    refused = []
    for need in _NEEDED:
        try:
            client.access_probe(need.resource, need.verb, ns)
        except KubeError as exc:
            if exc.kind in ("unreachable", "timeout", "tls"):
                raise
            if exc.status == 403:
                where = f"in namespace {ns}" if need.namespaced else "cluster-wide"
                refused.append(
                    (
                        need,
                        f"may not {need.verb} {need.what} ({need.resource} {where}), "
                        f"needed for {need.why}",
                    )
                )
    return refused


NO_TEAM_NAMESPACE_YET = (
    "no team namespace to check yet: there are no teams; create gp-<team> for each team "
    "before its jobs run here"
)


def cluster_test(*, cluster: Cluster, record: bool = True) -> ConnectionReport:
    """Connect and check everything the portal needs; the report says what is wrong in words.

    Order matters: each step assumes the one before worked (a 401 says nothing about RBAC).
    """
    report = _run_test(cluster, list(Team.objects.values_list("slug", flat=True)))
    if record:
        Cluster.objects.filter(pk=cluster.pk).update(
            last_test_at=timezone.now(),
            last_test_ok=report.ok,
            last_test_message=report.summary,
            **({"kubernetes_version": report.version} if report.version else {}),
        )
    return report


def _fail(report: ConnectionReport, name: str, message: str) -> ConnectionReport:
    report.checks.append(Check(name, False, message))
    report.ok = False
    report.summary = message
    return report


def _run_test(cluster: Cluster, team_slugs: list[str]) -> ConnectionReport:
    report = ConnectionReport(ok=True, summary="")
    try:
        client = cluster_client(cluster)
    except ClusterUnavailable as exc:
        return _fail(report, "connection", f"Cannot connect: {exc}")
    report.checks.append(Check("address", True, f"{cluster.api_url} is allowed"))
    # 1. Reachability and TLS (the version endpoint needs no special permission).
    try:
        report.version = str(client.version().get("gitVersion") or "")
    except KubeError as exc:
        label = {
            "unreachable": "Unreachable",
            "timeout": "Unreachable (timed out)",
            "tls": "TLS/CA mismatch",
            "auth": "401 Unauthorized",
        }.get(exc.kind, "API error")
        return _fail(report, "reachable", f"{label}: {exc.message}")
    report.checks.append(Check("reachable", True, f"TLS verified; Kubernetes {report.version}"))
    # 2. Credentials, and the node count.
    try:
        nodes = client.list_nodes()
    except KubeError as exc:
        if exc.status == 401:
            return _fail(report, "credentials", f"401 Unauthorized: {exc.message}")
        if exc.status == 403:
            return _fail(
                report,
                "credentials",
                f"403 Forbidden: cannot list nodes (the inventory needs it): {exc.message}",
            )
        return _fail(report, "credentials", f"Listing nodes failed: {exc.message}")
    report.node_count = len(nodes)
    gpu_nodes = sum(1 for n in nodes if _has_gpus(n))
    report.checks.append(Check("credentials", True, f"{len(nodes)} nodes, {gpu_nodes} with GPUs"))
    # 3. Volcano.
    try:
        served = client.api_group_versions()
    except KubeError as exc:
        return _fail(report, "volcano", f"Cannot list API groups: {exc.message}")
    missing = [
        gv
        for gv in ("batch.volcano.sh/v1alpha1", "scheduling.volcano.sh/v1beta1")
        if gv not in served
    ]
    if missing:
        return _fail(
            report,
            "volcano",
            f"Volcano CRDs missing: {', '.join(missing)} not served (install Volcano)",
        )
    report.checks.append(Check("volcano", True, "Volcano Job and Queue APIs are served"))
    # 4. Namespaces (the queue sync makes missing ones where RBAC allows it).
    namespaces = cluster_job_namespaces(cluster, team_slugs)
    failed = _check_namespaces(report, client, namespaces)
    if failed is not None:
        return failed
    warning = "" if namespaces else NO_TEAM_NAMESPACE_YET
    report.checks.append(
        Check("namespace", True, warning or f"namespace {', '.join(namespaces)} exists")
    )
    # 5. Every verb the portal needs.
    probe_ns = namespaces[0] if namespaces else cluster.namespace
    try:
        refused = _forbidden(client, probe_ns)
    except KubeError as exc:
        return _fail(report, "permissions", f"Unreachable: {exc.message}")
    if refused:
        for need, words in refused:
            report.checks.append(Check(f"{need.verb} {need.resource}", False, words))
        return _fail(
            report,
            "permissions",
            "403 Forbidden: "
            + "; ".join(words for _, words in refused)
            + "; apply deploy/rbac.yaml",
        )
    report.checks.append(Check("permissions", True, "every needed verb is granted"))
    # 6. Queue commands: optional (without them a team that loses its quota gets capability 0).
    try:
        client.create_command(
            cluster.command_namespace,
            volcano.build_queue_command(
                queue_name="gp-connection-test",
                queue_uid="00000000-0000-0000-0000-000000000000",
                action="CloseQueue",
                namespace=cluster.command_namespace,
                name="gp-connection-test",
            ),
            dry_run=True,
        )
        report.checks.append(Check("commands", True, "Volcano Commands can be created"))
    except KubeError as exc:
        note = (
            "Volcano Commands (bus.volcano.sh) are not served"
            if exc.not_found
            else f"Volcano Commands cannot be created ({exc.status})"
        )
        report.checks.append(
            Check("commands", exc.status not in (403,), f"{note}: closed queues get capability 0")
        )
    report.summary = (
        f"OK: Kubernetes {report.version}, {report.node_count} nodes ({gpu_nodes} with GPUs)"
        + (f"; but {warning}" if warning else "")
    )
    return report


def _check_namespaces(
    report: ConnectionReport, client: KubeClient, namespaces: list[str]
) -> ConnectionReport | None:
    """The failed report when a job namespace is missing or unreadable; None when all exist."""
    absent = []
    for ns in namespaces:
        try:
            client.get_namespace(ns)
        except KubeError as exc:
            if exc.not_found:
                absent.append(ns)
            elif exc.status == 403:
                return _fail(
                    report, "namespace", f"403 Forbidden: cannot read namespace {ns}: {exc.message}"
                )
            else:
                return _fail(report, "namespace", f"Reading namespace {ns} failed: {exc.message}")
    if absent:
        return _fail(
            report,
            "namespace",
            f"Namespace missing: {', '.join(absent)} "
            "(create it, or sync the queues: the portal makes missing job namespaces)",
        )
    return None


def _has_gpus(node: dict[str, Any]) -> bool:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return any(r.endswith("/gpu") or r.startswith("nvidia.com/mig-") for r in allocatable)
