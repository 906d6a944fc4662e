"""One :class:`KubeClient` per cluster: its own ``Configuration`` and ``ApiClient`` (never the
client's global default, never ``load_kube_config``), and the one path every call takes:
rate-limited, timed out, JSON-decoded, errors translated (:mod:`clusters.kube.errors`). The
calls themselves live in the mixins beside this module, one per API family.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.api.apis_api import ApisApi
from kubernetes.client.api.core_v1_api import CoreV1Api
from kubernetes.client.api.custom_objects_api import CustomObjectsApi
from kubernetes.client.api.networking_v1_api import NetworkingV1Api
from kubernetes.client.api.version_api import VersionApi
from kubernetes.client.exceptions import ApiException

from clusters.kube.connection import Connection, RateLimiter, _memfd_pem, _NoLimit, _TokenFile
from clusters.kube.core import CoreMixin
from clusters.kube.errors import KubeError, _api_error, _transport_error
from clusters.kube.probes import ProbesMixin
from clusters.kube.serving import ServingMixin
from clusters.kube.volcano_api import VolcanoMixin
from clusters.kube.watch import WatchMixin


class KubeClient(CoreMixin, ProbesMixin, ServingMixin, VolcanoMixin, WatchMixin):
    """Everything the portal asks of one cluster, with timeouts and the cluster's rate limit."""

    def __init__(self, conn: Connection, *, limiter: RateLimiter | None = None) -> None:
        self.name = conn.name
        self.timeout = (min(5.0, conn.timeout), conn.timeout)
        self.limiter: RateLimiter = limiter or _NoLimit()
        self._creates = threading.BoundedSemaphore(max(1, conn.creates_in_flight))
        self._memfd: int | None = None
        self._streams: set[Any] = set()
        self._streams_lock = threading.Lock()
        cfg = k8s.Configuration()  # a fresh one: never the process-wide default
        cfg.host = conn.url
        cfg.verify_ssl = True
        cfg.ca_cert_data = conn.ca_pem
        cfg.retries = 0  # the callers decide what to retry
        cfg.connection_pool_maxsize = max(4, conn.creates_in_flight + 4)
        if conn.tls_server_name:
            cfg.tls_server_name = conn.tls_server_name
        if conn.token_file is not None:
            token_file = _TokenFile(conn.token_file)
            cfg.api_key = {"authorization": token_file.read()}
            cfg.api_key_prefix = {"authorization": "Bearer"}
            cfg.refresh_api_key_hook = token_file.refresh
        elif conn.token is not None:
            cfg.api_key = {"authorization": conn.token}
            cfg.api_key_prefix = {"authorization": "Bearer"}
        elif conn.client_cert_pem and conn.client_key_pem:
            self._memfd, path = _memfd_pem(conn.client_cert_pem + conn.client_key_pem)
            cfg.cert_file = path
        else:
            raise KubeError("no credentials to authenticate with", kind="auth")
        self.api = k8s.ApiClient(cfg)
        # Imported at module level on purpose: the client loads these (pydantic-heavy)
        # modules lazily, which costs seconds in the first task of every worker otherwise.
        self.core = CoreV1Api(self.api)
        self.custom = CustomObjectsApi(self.api)
        self.networking = NetworkingV1Api(self.api)
        self.versions = VersionApi(self.api)
        self.apis = ApisApi(self.api)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.api.close()
        if self._memfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._memfd)
            self._memfd = None

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One request: rate-limited, timed out, JSON-decoded, errors translated."""
        self.limiter.acquire()
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
            data = resp.data
        except ApiException as exc:
            raise _api_error(exc, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _transport_error(exc, what) from None
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError:
            return data.decode("utf-8", "replace")

    def version(self) -> dict[str, Any]:
        return dict(self._call("reading the server version", self.versions.get_code))

    def api_group_versions(self) -> set[str]:
        """``group/version`` strings the server serves (for "are the Volcano CRDs there")."""
        data = self._call("listing API groups", self.apis.get_api_versions)
        out: set[str] = set()
        for group in data.get("groups") or []:
            for version in group.get("versions") or []:
                out.add(str(version.get("groupVersion")))
        return out

    def _list(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return self._list_rv(what, fn, *args, **kwargs)[0]

    def _list_rv(
        self, what: str, fn: Any, *args: Any, **kwargs: Any
    ) -> tuple[list[dict[str, Any]], str]:
        """All pages of a list (500 per page) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = dict(kwargs, limit=500)
            if token:
                page["_continue"] = token
            data = self._call(what, fn, *args, **page)
            items.extend(data.get("items") or [])
            meta = data.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")
