"""The cluster the portal runs in, reached through the portal's own service account.

A pod learns its API server from ``KUBERNETES_SERVICE_HOST``/``_PORT`` and finds its
service account's token, CA and namespace in the projected volume
(``GPUPOOL_SERVICE_ACCOUNT_DIR``, by default Kubernetes' ``/var/run/secrets/…``). Nothing of
it is stored: a cluster registered ``--in-cluster`` keeps no credentials, and every connection
reads them here, so the kubelet's token rotation and a moved API server need nothing from an
admin. The URL comes from the pod's environment, never from a form, which is why it skips the
URL guard that user-given URLs pass (a private address is what it always is).
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

__all__ = ["InCluster", "InClusterError", "in_cluster_read"]


class InClusterError(Exception):
    """This process is not in a pod with a service account; the message says what is missing."""


@dataclass(frozen=True)
class InCluster:
    url: str
    ca_pem: str
    token_file: str
    account: str  # namespace/name, from the token's subject, for people to read


def in_cluster_read() -> InCluster:
    """Where and how this pod reaches its own API server; InClusterError when it cannot."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise InClusterError(
            "not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST/PORT are not set)"
        )
    folder = Path(settings.GPUPOOL_SERVICE_ACCOUNT_DIR)
    token_file, ca_file = folder / "token", folder / "ca.crt"
    for path in (token_file, ca_file):
        if not path.is_file():
            raise InClusterError(
                f"{path} is missing: mount the service account's token "
                "(automountServiceAccountToken: true, deploy/kubernetes/components/in-cluster)"
            )
    host = f"[{host}]" if ":" in host else host  # an IPv6 service address
    return InCluster(
        url=f"https://{host}:{port}",
        ca_pem=ca_file.read_text(encoding="ascii"),
        token_file=str(token_file),
        account=_account(token_file.read_text(encoding="ascii").strip()),
    )


def _account(token: str) -> str:
    """``namespace/name`` of a service-account token's subject (read, not verified: only
    shown), or ``service account`` when the token is not a JWT of that shape."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        _, _, namespace, name = str(claims["sub"]).split(":")
    except (IndexError, KeyError, ValueError, TypeError):
        return "service account"
    return f"{namespace}/{name}"
