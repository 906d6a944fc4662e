"""Clients: one Kubernetes client per cluster per process, and whether the cluster answers.

Every call the portal makes to a cluster goes through :func:`cluster_client`, so the URL guard
(:func:`clusters.urlcheck.check_api_url` with the operator's settings, DNS included) runs again
right before each client is built, and a cached client is rebuilt when the connection details
change. The reachable/unreachable marks live here because only a call through a client can
tell; the job namespaces too, since a client makes the ones a cluster lacks.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import threading
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from clusters.incluster import InClusterError, in_cluster_read
from clusters.kube import Connection, KubeClient, KubeError
from clusters.models import AuthMethod, Cluster
from clusters.ratelimit import SharedRateLimiter
from clusters.secrets import CredentialsUnreadable, credentials_open
from clusters.urlcheck import (
    UnresolvableHostError,
    UnsafeUrlError,
    check_api_url,
    check_prometheus_url,
)
from portal import hooks
from rules import volcano

log = logging.getLogger(__name__)


class ClusterUnavailable(Exception):
    """The portal cannot build a client for this cluster (URL refused, credentials unreadable)."""


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


def _namespaces_to_check(cluster: Cluster, team_slugs: Iterable[str]) -> list[str]:
    """The job namespaces that must exist: the cluster's, or one gp-<team> per team (none
    before the first team exists, which the report says instead of passing in silence)."""
    if not cluster.namespace_per_team:
        return [cluster.namespace]
    return sorted({volcano.team_namespace_name(s) for s in team_slugs})
