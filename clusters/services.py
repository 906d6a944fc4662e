"""Clusters: register them, keep their credentials, build clients, test connections, read logs.

Every entry point (admin, staff page, REST, ``manage.py``) calls these functions, so the rules
live once: a kubeconfig or token + CA goes through :func:`clusters.kubeconfig.parse_kubeconfig`
(the one validator of untrusted connection input), the URL through
:func:`clusters.urlcheck.check_api_url` with the operator's settings, before any connection and
again, after DNS, right before each client is built. The other services (inventory, queues,
dispatch, status) live in modules of their own beside this one.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import logging
import math
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from django.conf import settings
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from clusters import volcano
from clusters.incluster import InClusterError, in_cluster_read
from clusters.kube import (
    FIELD_MANAGER,
    RBAC_INGRESSES,
    RBAC_JOBS,
    RBAC_PODGROUPS,
    RBAC_QUEUES,
    Connection,
    KubeClient,
    KubeError,
)
from clusters.kubeconfig import ClusterCredentials, KubeconfigError, parse_kubeconfig
from clusters.models import (
    AuthMethod,
    Cluster,
    ClusterState,
    ServingExposure,
    SharingMode,
    VolcanoJobRecord,
)
from clusters.ratelimit import SharedRateLimiter
from clusters.secrets import (
    CredentialsUnreadable,
    SecretMaterial,
    credentials_open,
    credentials_seal,
    secret_hint,
)
from clusters.urlcheck import (
    UnresolvableHostError,
    UnsafeUrlError,
    check_api_url,
    check_prometheus_url,
)
from portal import hooks
from portal.errors import ApplicationError, NotFound
from portal.models import Team

log = logging.getLogger(__name__)

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

__all__ = [
    "FIELD_MANAGER",
    "ClusterUnavailable",
    "ConnectionReport",
    "cluster_client",
    "cluster_credentials_from_input",
    "cluster_job_namespace",
    "cluster_job_namespaces",
    "cluster_prometheus_url_check",
    "cluster_reachable_mark",
    "cluster_register",
    "cluster_settings_check",
    "cluster_test",
    "cluster_unreachable_mark",
    "cluster_url_check",
    "clusters_forget_clients",
    "job_namespace_ensure",
]


class ClusterUnavailable(Exception):
    """The portal cannot build a client for this cluster (URL refused, credentials unreadable)."""


# ---------------------------------------------------------------------------------------------
# Input: URL and credentials
# ---------------------------------------------------------------------------------------------
def cluster_url_check(url: str) -> str:
    """The normalized URL if the operator's settings allow connecting to it (DNS included)."""
    return check_api_url(
        url,
        allow_local=settings.GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS,
        allow_private=settings.GPUPOOL_ALLOW_PRIVATE_CLUSTER_URLS,
    )


def cluster_prometheus_url_check(url: str) -> str:
    """The normalized Prometheus URL if the operator's settings allow querying it (DNS
    included): the same guard as the API URL, at registration and before every collection."""
    return check_prometheus_url(
        url,
        allow_local=settings.GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS,
        allow_private=settings.GPUPOOL_ALLOW_PRIVATE_CLUSTER_URLS,
    )


def _kubeconfig_from_parts(*, server: str, ca_pem: str | bytes, token: str) -> str:
    """A minimal kubeconfig around a token and a CA, so both inputs share one validator."""
    ca = ca_pem.encode() if isinstance(ca_pem, str) else ca_pem
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca).decode("ascii"),
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    return yaml.safe_dump(document)


def cluster_credentials_from_input(
    *,
    kubeconfig: str | bytes | None = None,
    api_url: str | None = None,
    token: str | None = None,
    ca_pem: str | bytes | None = None,
) -> ClusterCredentials:
    """Credentials from an uploaded kubeconfig, or from a URL + token + CA; ApplicationError
    naming the field otherwise (never quoting a value)."""
    if kubeconfig:
        try:
            return parse_kubeconfig(kubeconfig)
        except KubeconfigError as exc:
            raise ApplicationError(
                f"The kubeconfig cannot be used: {exc}", fields={"kubeconfig": [str(exc)]}
            ) from None
    missing = [
        name
        for name, value in (("api_url", api_url), ("token", token), ("ca_pem", ca_pem))
        if not value
    ]
    if missing:
        raise ApplicationError(
            "Give a kubeconfig, or the API URL, a token and the CA certificate.",
            fields={name: ["This field is required without a kubeconfig."] for name in missing},
        )
    assert api_url and token and ca_pem
    try:
        return parse_kubeconfig(
            _kubeconfig_from_parts(server=api_url, ca_pem=ca_pem, token=token.strip())
        )
    except KubeconfigError as exc:
        where = {"clusters[0].cluster.server": "api_url", "users[0].user.token": "token"}.get(
            exc.path, "ca_pem" if "certificate-authority" in exc.path else "api_url"
        )
        raise ApplicationError(
            f"The {where.replace('_', ' ')} cannot be used: {exc.problem}",
            fields={where: [exc.problem]},
        ) from None


def _material(creds: ClusterCredentials) -> SecretMaterial:
    return SecretMaterial(
        token=creds.token,
        client_cert_pem=creds.client_cert_pem,
        client_key_pem=creds.client_key_pem,
    )


# ---------------------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------------------
_CLUSTER_OPTIONS = frozenset(
    {
        "namespace",
        "namespace_per_team",
        "scheduler_name",
        "gpu_label",
        "prometheus_url",
        "state",
        "command_namespace",
        "request_rate",
        "creates_in_flight",
        "tolerate_gpu_taint",
        "run_as_non_root",
        "mount_service_account_token",
        "sharing_mode",
        "serving_exposure",
        "ingress_host_pattern",
        "ingress_class_name",
    }
)


def _is_dns_label(value: str) -> bool:
    return len(value) <= 63 and _DNS_LABEL.fullmatch(value) is not None


def _is_dns_subdomain(value: str) -> bool:
    return len(value) <= 253 and all(_is_dns_label(part) for part in value.split("."))


RESERVED_CLUSTER_NAMES = frozenset({"register", "job-logs"})
"""Names /clusters/<name>/ could not reach: the portal's own pages under /clusters/ have them."""


def cluster_settings_check(*, name: str | None = None, **options: Any) -> None:
    """ApplicationError naming the field when a cluster name or option would be refused.

    The one rule for every door: ``cluster_register`` calls it, and so does the admin form
    (before anything is saved, so the admin shows a field error instead of a 500, also when
    only the options or the name change and no credentials are given).
    """
    if name is not None and not _is_dns_label(name):
        raise ApplicationError(
            "A cluster name must be a DNS-1123 label.",
            fields={"name": ["Lower-case letters, digits and '-', at most 63 characters."]},
        )
    if name in RESERVED_CLUSTER_NAMES:
        raise ApplicationError(
            f"{name} is a page of the portal's, not a cluster name.",
            fields={"name": [f"Reserved: {', '.join(sorted(RESERVED_CLUSTER_NAMES))}."]},
        )
    unknown = set(options) - _CLUSTER_OPTIONS
    if unknown:
        raise ValueError(f"unknown cluster options: {sorted(unknown)}")
    for key in ("namespace", "command_namespace"):
        value = options.get(key)
        if value is not None and not _is_dns_label(value):
            raise ApplicationError(
                f"{key.replace('_', ' ').capitalize()} must be a DNS-1123 label.",
                fields={key: ["Lower-case letters, digits and '-', at most 63 characters."]},
            )
    if options.get("sharing_mode") not in (None, *SharingMode.values):
        raise ApplicationError(
            "Unknown GPU sharing mode.",
            fields={"sharing_mode": [", ".join(SharingMode.values)]},
        )
    if options.get("serving_exposure") not in (None, *ServingExposure.values):
        raise ApplicationError(
            "Unknown serving exposure.",
            fields={"serving_exposure": [", ".join(ServingExposure.values)]},
        )
    if options.get("ingress_host_pattern"):
        try:
            volcano.ingress_host_pattern_check(options["ingress_host_pattern"])
        except volcano.ManifestError as exc:
            raise ApplicationError(
                "The ingress host pattern is refused.",
                fields={"ingress_host_pattern": [str(exc).partition(": ")[2]]},
            ) from None
    ingress_class = options.get("ingress_class_name")
    if ingress_class and not _is_dns_subdomain(ingress_class):
        raise ApplicationError(
            "The IngressClass name must be a DNS-1123 subdomain.",
            fields={"ingress_class_name": ["Lower-case letters, digits, '-' and '.'."]},
        )
    if options.get("state") not in (None, *ClusterState.values):
        raise ApplicationError(
            "Unknown state.", fields={"state": ["enabled, draining or disabled"]}
        )
    if options.get("prometheus_url"):
        try:
            cluster_prometheus_url_check(options["prometheus_url"])
        except UnsafeUrlError as exc:
            raise ApplicationError(
                f"The Prometheus URL is refused: {exc}", fields={"prometheus_url": [str(exc)]}
            ) from None


def cluster_register(
    *,
    name: str,
    credentials: ClusterCredentials,
    update: bool = False,
    **options: Any,
) -> tuple[Cluster, bool]:
    """Create (or, with ``update``, re-key) a cluster from validated credentials; (cluster,
    created). The URL is checked with DNS first; nothing is stored when any check fails."""
    cluster_settings_check(name=name, **options)
    try:
        url = cluster_url_check(credentials.server)
    except UnsafeUrlError as exc:
        raise ApplicationError(
            f"The API URL is refused: {exc}", fields={"api_url": [str(exc)]}
        ) from None
    if credentials.namespace and "namespace" not in options:
        options["namespace"] = credentials.namespace
    material = _material(credentials)
    now = timezone.now()
    values: dict[str, Any] = {
        "api_url": url,
        "ca_pem": credentials.ca_pem,
        "tls_server_name": credentials.tls_server_name or "",
        "auth_method": credentials.auth_method,
        "credentials": credentials_seal(material),
        "credential_hint": secret_hint(material),
        "credentials_updated_at": now,
        **options,
    }
    return _cluster_save(name=name, values=values, update=update)


def cluster_register_in_cluster(
    *, name: str, update: bool = False, **options: Any
) -> tuple[Cluster, bool]:
    """Register (or, with ``update``, switch to) the cluster this portal runs in, reached with
    its own service account (``clusters.incluster``): no credentials are stored, every
    connection reads the pod's. ApplicationError naming ``in_cluster`` outside a pod."""
    cluster_settings_check(name=name, **options)
    try:
        here = in_cluster_read()
    except InClusterError as exc:
        raise ApplicationError(
            f"The cluster this portal runs in cannot be used: {exc}",
            fields={"in_cluster": [str(exc)]},
        ) from None
    values: dict[str, Any] = {
        "api_url": here.url,
        "ca_pem": here.ca_pem,
        "tls_server_name": "",
        "auth_method": AuthMethod.IN_CLUSTER,
        "credentials": "",
        "credential_hint": f"service account {here.account}",
        "credentials_updated_at": timezone.now(),
        **options,
    }
    return _cluster_save(name=name, values=values, update=update)


def _cluster_save(*, name: str, values: dict[str, Any], update: bool) -> tuple[Cluster, bool]:
    """Create the cluster ``name`` or (with ``update``) replace its fields; (cluster, created)."""
    with transaction.atomic():
        existing = Cluster.objects.select_for_update().filter(name=name).first()
        if existing is not None and not update:
            raise ApplicationError(
                f"A cluster named {name} is already registered.",
                fields={"name": ["Already registered; update it instead."]},
            )
        if existing is None:
            cluster = Cluster.objects.create(name=name, **values)
            created = True
        else:
            for key, value in values.items():
                setattr(existing, key, value)
            existing.save()
            cluster, created = existing, False
    clusters_forget_clients(cluster.pk)
    log.info("cluster %s %s (%s)", name, "registered" if created else "updated", values["api_url"])
    return cluster, created


def cluster_state_set(*, cluster: Cluster, state: str) -> Cluster:
    """Enable, drain or disable a cluster. Draining and disabled clusters take nothing new at
    the next scheduling cycle; their running jobs go on (the engine reads the state each cycle,
    so nothing else has to be told)."""
    cluster_settings_check(state=state)
    Cluster.objects.filter(pk=cluster.pk).update(state=state)
    cluster.state = state
    log.info("cluster %s is now %s", cluster.name, state)
    return cluster


def cluster_delete(*, cluster: Cluster) -> None:
    """Forget a cluster. Refused while any job record points at it: a job's placement and
    history name its cluster, so such a cluster is disabled instead, never deleted."""
    jobs = cluster.jobs.count()
    if jobs:
        raise ApplicationError(
            f"{jobs} job{'s' if jobs != 1 else ''} ran or run on {cluster.name}; their history "
            "keeps the cluster. Disable it instead: it then takes nothing new.",
            fields={"name": ["Has jobs; disable instead."]},
        )
    pk, name = cluster.pk, cluster.name
    cluster.delete()
    clusters_forget_clients(pk)
    log.info("cluster %s deleted", name)


def cluster_job_namespace(cluster: Cluster, team_slug: str) -> str:
    """Where a team's jobs run on this cluster."""
    if cluster.namespace_per_team:
        return volcano.team_namespace_name(team_slug)
    return cluster.namespace


# ---------------------------------------------------------------------------------------------
# Clients: one per cluster per process, rebuilt when the connection details change
# ---------------------------------------------------------------------------------------------
_clients: dict[int, tuple[tuple[Any, ...], KubeClient]] = {}
_clients_lock = threading.Lock()


def job_namespace_ensure(client: KubeClient, name: str) -> str | None:
    """Create a job namespace the cluster lacks (labelled as the portal's): None when it is
    there, or was just made; else what went wrong, in words.

    A cluster that lost its state (an API server restarted empty) has lost its namespaces too;
    the portal makes the ones its jobs go to again. Without the RBAC grant to create namespaces
    (``deploy/rbac.yaml``) this reports the refusal and a cluster admin makes it.
    """
    try:
        client.get_namespace(name)
        return None
    except KubeError as exc:
        if not exc.not_found:
            return f"cannot read namespace {name}: {exc.message}"
    try:
        client.create_namespace(name, labels={volcano.LABEL_MANAGED_BY: volcano.MANAGED_BY})
    except KubeError as exc:
        if exc.already_exists:
            return None
        return f"namespace {name} is missing and could not be created: {exc.message}"
    log.info("created the missing job namespace %s", name)
    return None


def cluster_job_namespaces(cluster: Cluster, team_slugs: Iterable[str]) -> list[str]:
    """The job namespaces that must exist: the cluster's, or one gp-<team> per team."""
    return _namespaces_to_check(cluster, team_slugs)


def _fingerprint(cluster: Cluster) -> tuple[Any, ...]:
    return (
        cluster.api_url,
        hashlib.sha256(cluster.ca_pem.encode()).hexdigest(),
        hashlib.sha256(cluster.credentials.encode()).hexdigest(),
        cluster.tls_server_name,
        cluster.request_rate,
        cluster.creates_in_flight,
    )


def cluster_connection(cluster: Cluster) -> Connection:
    """Connection details with the secret opened in memory; ClusterUnavailable when refused."""
    if cluster.auth_method == AuthMethod.IN_CLUSTER:
        return _in_cluster_connection(cluster)
    try:
        url = cluster_url_check(cluster.api_url)
    except UnresolvableHostError as exc:
        raise ClusterUnavailable(f"unreachable: {exc}") from None
    except UnsafeUrlError as exc:
        raise ClusterUnavailable(f"the API URL is refused: {exc}") from None
    try:
        material = credentials_open(cluster.credentials, cluster_name=cluster.name)
    except CredentialsUnreadable as exc:
        raise ClusterUnavailable(str(exc)) from None
    return Connection(
        name=cluster.name,
        url=url,
        ca_pem=cluster.ca_pem,
        token=material.token,
        client_cert_pem=material.client_cert_pem,
        client_key_pem=material.client_key_pem,
        tls_server_name=cluster.tls_server_name or None,
        timeout=float(settings.GPUPOOL_CLUSTER_TIMEOUT_SECONDS),
        creates_in_flight=cluster.creates_in_flight or settings.GPUPOOL_CLUSTER_CREATES_IN_FLIGHT,
    )


def _in_cluster_connection(cluster: Cluster) -> Connection:
    """The pod's own API server, CA and token file, read now (``clusters.incluster``)."""
    try:
        here = in_cluster_read()
    except InClusterError as exc:
        raise ClusterUnavailable(f"in-cluster: {exc}") from None
    return Connection(
        name=cluster.name,
        url=here.url,
        ca_pem=here.ca_pem,
        token_file=here.token_file,
        timeout=float(settings.GPUPOOL_CLUSTER_TIMEOUT_SECONDS),
        creates_in_flight=cluster.creates_in_flight or settings.GPUPOOL_CLUSTER_CREATES_IN_FLIGHT,
    )


def cluster_client(cluster: Cluster) -> KubeClient:
    """This process's client for ``cluster`` (built on first use, after the URL re-check)."""
    key = _fingerprint(cluster)
    with _clients_lock:
        cached = _clients.get(cluster.pk)
        if cached is not None and cached[0] == key:
            return cached[1]
    with _building_lock(cluster.pk):  # threads of one worker build one client, not one each
        with _clients_lock:
            cached = _clients.get(cluster.pk)
            if cached is not None and cached[0] == key:
                return cached[1]
        conn = cluster_connection(cluster)  # re-checks the URL (with DNS) for every new client
        rate = cluster.request_rate or settings.GPUPOOL_CLUSTER_REQUEST_RATE
        try:
            client = KubeClient(conn, limiter=SharedRateLimiter(str(cluster.pk), rate))
        except KubeError as exc:
            raise ClusterUnavailable(exc.message) from None
        with _clients_lock:
            old = _clients.pop(cluster.pk, None)
            _clients[cluster.pk] = (key, client)
    if old is not None:
        old[1].close()
    return client


def cluster_unreachable_mark(cluster: Cluster, problem: str) -> dt.datetime:
    """Record that ``cluster`` cannot be reached (the first failure's time is kept, the
    problem is the latest); returns since when it has been unreachable."""
    now = timezone.now()
    newly = Cluster.objects.filter(pk=cluster.pk, unreachable_since__isnull=True).update(
        unreachable_since=now, unreachable_error=problem[:2000]
    )
    if newly:
        hooks.cluster_unreachable.fire_on_commit(cluster.pk)  # platform admins hear of it
    else:
        Cluster.objects.filter(pk=cluster.pk).update(
            unreachable_since=Coalesce(F("unreachable_since"), Value(now)),
            unreachable_error=problem[:2000],
        )
    since = Cluster.objects.filter(pk=cluster.pk).values_list("unreachable_since", flat=True)
    cluster.unreachable_since = since.first() or now
    return cluster.unreachable_since


def cluster_reachable_mark(cluster: Cluster) -> bool:
    """A call reached ``cluster``: clear its unreachable mark. True when this call cleared it
    (it costs a query only when the row, as loaded, had one)."""
    if cluster.unreachable_since is None:
        return False
    cleared = Cluster.objects.filter(pk=cluster.pk, unreachable_since__isnull=False).update(
        unreachable_since=None, unreachable_error=""
    )
    cluster.unreachable_since = None
    if cleared:
        log.info("cluster %s is reachable again", cluster.name)
    return bool(cleared)


_build_locks: dict[int, threading.Lock] = {}


def _building_lock(pk: int) -> threading.Lock:
    with _clients_lock:
        return _build_locks.setdefault(pk, threading.Lock())


def clusters_forget_clients(*pks: int) -> None:
    """Drop cached clients (all of them without arguments), e.g. after a credential change."""
    with _clients_lock:
        targets = list(pks) if pks else list(_clients)
        dropped = [_clients.pop(pk) for pk in targets if pk in _clients]
    for _, client in dropped:
        client.close()


# ---------------------------------------------------------------------------------------------
# Test connection
# ---------------------------------------------------------------------------------------------
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


def _namespaces_to_check(cluster: Cluster, team_slugs: Iterable[str]) -> list[str]:
    """The job namespaces that must exist: the cluster's, or one gp-<team> per team (none
    before the first team exists, which the report says instead of passing in silence)."""
    if not cluster.namespace_per_team:
        return [cluster.namespace]
    return sorted({volcano.team_namespace_name(s) for s in team_slugs})


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
    namespaces = _namespaces_to_check(cluster, team_slugs)
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


# ---------------------------------------------------------------------------------------------
# Logs
# ---------------------------------------------------------------------------------------------
LOG_TAIL_DEFAULT = 500
LOG_TAIL_MAX = 10_000
LOG_BYTES_MAX = 2 * 1024 * 1024
LOG_SINCE_SLACK_SECONDS = 120
"""A read after a cursor asks the cluster for the last (portal now - cursor + this) seconds:
room for the cluster's clock running ahead of the portal's. A larger skew shows (the cursor's
own line is not in the answer) and is read again by tail instead."""
LOG_ATTEMPTS = ("current", "previous")
"""``previous``: the run before the container last restarted in place, as the kubelet keeps
it (``kubectl logs --previous``)."""

_LOG_TIME = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})")
_LOG_DURATION = re.compile(r"(\d{1,7})([smhd]?)")
_LOG_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def log_time_nanos(text: str) -> int | None:
    """An RFC 3339 time (as kubelets stamp lines, up to nanoseconds) in epoch nanoseconds."""
    match = _LOG_TIME.fullmatch(text)
    if match is None:
        return None
    zone = "+00:00" if match[3] == "Z" else match[3]
    try:
        moment = dt.datetime.fromisoformat(match[1] + zone)
    except ValueError:
        return None
    return int(moment.timestamp()) * 10**9 + int((match[2] or "").ljust(9, "0"))


@dataclass(frozen=True)
class LogSince:
    """Where a read starts: after a line's timestamp (``after``, what ``next_since`` hands
    back), or some seconds ago (``seconds``)."""

    after: str = ""
    seconds: int = 0

    @property
    def after_nanos(self) -> int:
        return log_time_nanos(self.after) or 0


def log_since_parse(value: str) -> LogSince:
    """``since`` as a client writes it: an RFC 3339 time (the lines after it) or a duration
    like ``90s``, ``10m``, ``2h``, ``1d`` (the lines of that last stretch)."""
    text = (value or "").strip()
    if log_time_nanos(text) is not None:
        return LogSince(after=text)
    match = _LOG_DURATION.fullmatch(text.lower())
    if match is None or int(match[1]) == 0:
        raise ApplicationError(
            "since must be an RFC 3339 time or a duration.",
            fields={"since": ["Use a line's timestamp (2025-03-04T10:30:15.123Z) or 10m, 2h."]},
        )
    return LogSince(seconds=int(match[1]) * _LOG_UNITS[match[2]])


@dataclass
class JobLogs:
    """One replica's log (or why there is none), as the job page and the API show it."""

    replica: int
    pod: str
    text: str = ""
    message: str = ""
    available: bool = False
    attempt: str = "current"
    lines: list[tuple[str, str]] = field(default_factory=list)
    """(timestamp, text) per line, oldest first."""
    next_since: str = ""
    """The last line's timestamp (or the ``since`` read after, when nothing came): read
    ``since`` it for only what comes next."""
    running: bool = False
    """The job has not ended: more lines may come."""


def _log_lines(raw: str) -> list[tuple[str, str]]:
    """``TIMESTAMP text`` lines as (timestamp, text); a line cut by the byte limit is dropped
    (the next read starts after the last whole one)."""
    parts = raw.split("\n")
    cut = parts[-1] != "" and len(raw.encode()) >= LOG_BYTES_MAX
    if parts[-1] == "" or cut:
        parts.pop()
    out = []
    for line in parts:
        stamp, _, text = line.partition(" ")
        out.append((stamp, text) if log_time_nanos(stamp) is not None else ("", line))
    return out


def _read_log(
    client: KubeClient,
    namespace: str,
    pod: str,
    *,
    tail: int | None,
    previous: bool,
    since: LogSince | None,
) -> list[tuple[str, str]]:
    """The lines to show, always read with timestamps (the cursor of the next read)."""
    read = functools.partial(
        client.read_pod_log,
        namespace,
        pod,
        timestamps=True,
        previous=previous,
        limit_bytes=LOG_BYTES_MAX,
    )
    if since is None:
        return _log_lines(read(tail_lines=tail))
    if since.seconds:
        return _log_lines(read(tail_lines=tail, since_seconds=since.seconds))
    after = since.after_nanos
    behind = after / 1e9 - time.time()
    lines = _log_lines(
        read(
            tail_lines=LOG_TAIL_MAX,
            since_seconds=max(1, math.ceil(LOG_SINCE_SLACK_SECONDS - behind)),
        )
    )
    # The answer starts at or before the cursor's own line only if nothing between it and
    # the answer's first line was left out (the cluster's clock ahead, or a restart).
    if not any(0 < (log_time_nanos(stamp) or 0) <= after for stamp, _ in lines):
        lines = _log_lines(read(tail_lines=LOG_TAIL_MAX))
    return [line for line in lines if (log_time_nanos(line[0]) or 0) > after]


def replica_restarted(job: Any, replica: int) -> bool:
    """Whether the watch saw replica ``replica``'s containers restart in place (its record's
    pod entry counts them): only then has the kubelet a previous run's log to give."""
    pods = (
        VolcanoJobRecord.objects.filter(job_id=job.pk).values_list("pods", flat=True).first() or {}
    )
    entry = pods.get(str(replica)) or {}
    return int(entry.get("restarts") or 0) > 0


def job_logs(
    *,
    job: Any,
    replica: int = 0,
    tail: int | None = LOG_TAIL_DEFAULT,
    attempt: str = "current",
    since: LogSince | None = None,
    timestamps: bool = False,
) -> JobLogs:
    """One replica's main container: its last ``tail`` lines, or with ``since`` the lines
    after a cursor (``next_since`` of the previous read: how the page follows a log and a
    CLI tails it) or of the last so many seconds; ``attempt="previous"`` for the run before
    the container restarted.

    Access is the caller's business (``portal.access.job_get_for_user``). The answer is never
    an exception for things a user cannot fix: a job not started yet, a pod still pulling its
    image, or pods already garbage-collected come back as a message.
    """
    if not 0 <= replica < job.replicas:
        raise ApplicationError(
            f"This job has replicas 0 to {job.replicas - 1}.",
            fields={"replica": [f"Must be between 0 and {job.replicas - 1}."]},
        )
    if attempt not in LOG_ATTEMPTS:
        raise ApplicationError(
            "attempt must be current or previous.",
            fields={"attempt": ["current, or previous (the run before the last restart)."]},
        )
    if tail is not None:
        tail = max(1, min(LOG_TAIL_MAX, tail))
    pod = volcano.pod_of_replica(volcano.job_run_name(job), job.kind, job.replicas, replica)
    logs = JobLogs(
        replica=replica,
        pod=pod,
        attempt=attempt,
        next_since=since.after if since else "",
        running=not job.is_terminal,
    )
    record = VolcanoJobRecord.objects.filter(job_id=job.pk).select_related("cluster").first()
    if record is None or job.cluster_id is None:
        logs.message = "The job has not been started on a cluster yet."
        return logs
    try:
        client = cluster_client(record.cluster)
        logs.lines = _read_log(
            client,
            record.namespace,
            pod,
            tail=tail,
            previous=attempt == "previous",
            since=since,
        )
        logs.available = True
    except ClusterUnavailable as exc:
        logs.message = f"The cluster cannot be reached: {exc}"
    except KubeError as exc:
        logs.message = _log_problem(exc, attempt)
    stamped = [line for line in logs.lines if line[0]]
    if stamped:
        logs.next_since = stamped[-1][0]
    logs.text = "".join(
        (f"{stamp} {text}" if timestamps and stamp else text) + "\n" for stamp, text in logs.lines
    )
    return logs


def _log_problem(exc: KubeError, attempt: str) -> str:
    if exc.not_found:
        return (
            "The pod is gone (finished jobs' pods are removed after a while), "
            "so its log is no longer available."
        )
    if exc.status == 400 and attempt == "previous" and "previous terminated" in exc.message:
        return "The container has not restarted, so there is no previous run."
    if exc.status == 400:
        return f"No log yet: {exc.message.rpartition(': ')[2]}"
    return f"The log could not be read: {exc.message}"


def job_log_download(
    *, job: Any, replica: int = 0, attempt: str = "current", timestamps: bool = False
) -> tuple[str, Iterator[bytes]]:
    """(file name, chunks) of one replica's whole log, for a download.

    Raises ApplicationError (a 400 naming the field) for a bad replica or attempt, and NotFound
    with the reason in words when there is no log to download.
    """
    probe = job_logs(job=job, replica=replica, tail=1, attempt=attempt)
    if not probe.available:
        raise NotFound(probe.message)
    record = VolcanoJobRecord.objects.select_related("cluster").get(job_id=job.pk)
    try:
        chunks = cluster_client(record.cluster).stream_pod_log(
            record.namespace, probe.pod, timestamps=timestamps, previous=attempt == "previous"
        )
    except (ClusterUnavailable, KubeError) as exc:
        raise NotFound(f"The log could not be read: {exc}") from None
    suffix = "-previous" if attempt == "previous" else ""
    name = volcano.label_value(job.name or "job")
    return f"{name}-replica-{replica}{suffix}.log", chunks
