"""Registration: add, re-key, drain, disable and forget clusters.

Every entry point (admin, staff page, REST, ``manage.py``) calls these functions, so the rules
live once: a kubeconfig or token + CA goes through :func:`clusters.kubeconfig.parse_kubeconfig`
(the one validator of untrusted connection input), the URL through
:func:`clusters.clients.cluster_url_check` before anything is stored, and
:func:`cluster_settings_check` is the one check of a name and its options.
"""

from __future__ import annotations

import base64
import logging
import re
from typing import Any

import yaml
from django.db import transaction
from django.utils import timezone

from clusters.clients import (
    cluster_prometheus_url_check,
    cluster_url_check,
    clusters_forget_clients,
)
from clusters.incluster import InClusterError, in_cluster_read
from clusters.kubeconfig import ClusterCredentials, KubeconfigError, parse_kubeconfig
from clusters.models import AuthMethod, Cluster, ClusterState, ServingExposure, SharingMode
from clusters.secrets import SecretMaterial, credentials_seal, secret_hint
from clusters.urlcheck import UnsafeUrlError
from portal.errors import ApplicationError
from rules import volcano

log = logging.getLogger(__name__)

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


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
