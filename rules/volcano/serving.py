"""Serving: the Service (and Ingress) in front of an inference job."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from rules.volcano.names import (
    INFERENCE_PORT_NAME,
    JOB_API_VERSION,
    JOB_KIND,
    LABEL_JOB_ID,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_TEAM,
    MANAGED_BY,
    VOLCANO_LABEL_JOB_NAME,
    _dns_name,
    _fail,
    _is_dns_label,
    _is_dns_subdomain,
    _job_uuid,
    label_value,
    volcano_job_name,
)

# --- Serving: the Service (and Ingress) in front of an inference job ---------------------------

SERVICE_API_VERSION: Final = "v1"
INGRESS_API_VERSION: Final = "networking.k8s.io/v1"
SERVING_SUFFIX: Final = "-serve"
EXPOSURE_CLUSTERIP: Final = "clusterip"
EXPOSURE_INGRESS: Final = "ingress"
EXPOSURES: Final[frozenset[str]] = frozenset({EXPOSURE_CLUSTERIP, EXPOSURE_INGRESS})
HOST_JOB: Final = "{job}"
HOST_TEAM: Final = "{team}"
_HOST_PLACEHOLDER = re.compile(r"\{[^}]*\}")


def serving_service_name(job_id: str) -> str:
    """The Service (and Ingress) of an inference job: the Volcano Job's name + ``-serve``.

    Not the Volcano Job's own name: the ``svc`` plugin already owns a headless Service by that
    name (pod DNS). 41 characters, a DNS-1035 label as a Service name must be."""
    return volcano_job_name(job_id) + SERVING_SUFFIX


def ingress_host_pattern_check(pattern: str) -> str:
    """``pattern`` if it can make an Ingress host for every job: it names ``{job}`` (one host
    per job, so two jobs never share a route), uses no placeholder but ``{job}`` and
    ``{team}``, and is a DNS-1123 subdomain once they are filled in. Else ManifestError."""
    if HOST_JOB not in pattern:
        raise _fail("ingress_host_pattern", "must contain {job}, so each job gets its own host")
    unknown = set(_HOST_PLACEHOLDER.findall(pattern)) - {HOST_JOB, HOST_TEAM}
    if unknown:
        raise _fail(
            "ingress_host_pattern",
            f"knows only {{job}} and {{team}}, not {', '.join(sorted(unknown))}",
        )
    sample = pattern.replace(HOST_JOB, "gp-" + "0" * 32).replace(HOST_TEAM, "gp-" + "t" * 20)
    if not _is_dns_subdomain(sample) or any(len(p) > 63 for p in sample.split(".")):
        raise _fail(
            "ingress_host_pattern",
            f"must give a lower-case DNS name such as {{job}}.serve.example.org, got {pattern!r}",
        )
    return pattern


def ingress_host(pattern: str, job_id: str, team_slug: str) -> str:
    """The host an inference job is reached at on an ingress cluster: the admin's pattern with
    ``{job}`` the Volcano Job's name and ``{team}`` the team as a DNS label."""
    ingress_host_pattern_check(pattern)
    team = _dns_name("", team_slug, 63) if team_slug else "team"
    return pattern.replace(HOST_JOB, volcano_job_name(job_id)).replace(HOST_TEAM, team)


@dataclass(frozen=True, kw_only=True)
class ServingSpec:
    """What the Service and Ingress of one inference job need.

    ``owner_uid`` is the Volcano Job's UID (from its create): with it both objects carry an
    owner reference, so the cluster's garbage collector removes them with the job even when
    the portal's own delete never arrives. ``host`` is set on an ingress cluster only.
    """

    job_id: str
    team_slug: str
    namespace: str
    port: int
    owner_uid: str | None = None
    host: str | None = None
    ingress_class_name: str | None = None
    volcano_name: str | None = None
    """The Volcano Job of the run whose pods the Service selects (and that owns it); None:
    the first run's. The Service's own name, and so the endpoint's address, stays the same
    across runs."""

    def __post_init__(self) -> None:
        volcano_job_name(self.job_id)
        if self.volcano_name is not None and not _is_dns_label(self.volcano_name):
            raise _fail("volcano_name", f"must be a DNS-1123 label, got {self.volcano_name!r}")
        if not _is_dns_label(self.namespace):
            raise _fail("namespace", f"must be a DNS-1123 label, got {self.namespace!r}")
        if isinstance(self.port, bool) or not 1 <= self.port <= 65535:
            raise _fail("port", f"must be between 1 and 65535, got {self.port}")
        if self.host is not None and not _is_dns_subdomain(self.host):
            raise _fail("host", f"must be a DNS-1123 subdomain, got {self.host!r}")
        if self.ingress_class_name is not None and not _is_dns_subdomain(self.ingress_class_name):
            raise _fail(
                "ingress_class_name", f"must be a DNS-1123 subdomain: {self.ingress_class_name!r}"
            )

    @property
    def run_name(self) -> str:
        """The Volcano Job whose pods the Service selects."""
        return self.volcano_name or volcano_job_name(self.job_id)

    @property
    def name(self) -> str:
        return serving_service_name(self.job_id)


def _serving_metadata(spec: ServingSpec) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": spec.name,
        "namespace": spec.namespace,
        "labels": {
            LABEL_MANAGED_BY: MANAGED_BY,
            LABEL_TEAM: label_value(spec.team_slug),
            LABEL_JOB_ID: str(_job_uuid(spec.job_id)),
            LABEL_KIND: "inference",
        },
    }
    if spec.owner_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": JOB_API_VERSION,
                "kind": JOB_KIND,
                "name": spec.run_name,
                "uid": spec.owner_uid,
                # Not the controller: Volcano's svc plugin controls its own headless Service.
                "controller": False,
                "blockOwnerDeletion": False,
            }
        ]
    return metadata


def build_serving_service(spec: ServingSpec) -> dict[str, Any]:
    """A ClusterIP Service on the job's port, selecting its server pods.

    The selector pairs Volcano's pod label (``volcano.sh/job-name``) with the portal's job
    label: either alone would do on a healthy cluster, both together can never pick a pod of
    another job. Only Ready pods become endpoints, which is what the readiness probe is for.
    """
    return {
        "apiVersion": SERVICE_API_VERSION,
        "kind": "Service",
        "metadata": _serving_metadata(spec),
        "spec": {
            "type": "ClusterIP",
            "selector": {
                VOLCANO_LABEL_JOB_NAME: spec.run_name,
                LABEL_JOB_ID: str(_job_uuid(spec.job_id)),
            },
            "ports": [
                {
                    "name": INFERENCE_PORT_NAME,
                    "port": spec.port,
                    "targetPort": INFERENCE_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def build_serving_ingress(spec: ServingSpec) -> dict[str, Any]:
    """A ``networking.k8s.io/v1`` Ingress routing the job's host to its Service, every path."""
    if spec.host is None:
        raise _fail("host", "an Ingress needs the job's host")
    ingress_spec: dict[str, Any] = {
        "rules": [
            {
                "host": spec.host,
                "http": {
                    "paths": [
                        {
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": {
                                "service": {
                                    "name": spec.name,
                                    "port": {"name": INFERENCE_PORT_NAME},
                                }
                            },
                        }
                    ]
                },
            }
        ]
    }
    if spec.ingress_class_name:
        ingress_spec["ingressClassName"] = spec.ingress_class_name
    return {
        "apiVersion": INGRESS_API_VERSION,
        "kind": "Ingress",
        "metadata": _serving_metadata(spec),
        "spec": ingress_spec,
    }


def serving_url(spec: ServingSpec) -> str:
    """Where a user calls the server: ``https://<host>`` through the Ingress (the cluster's
    ingress controller terminates TLS), else the Service's in-cluster DNS name and port."""
    if spec.host is not None:
        return f"https://{spec.host}"
    return f"http://{spec.name}.{spec.namespace}.svc.cluster.local:{spec.port}"
