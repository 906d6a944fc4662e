"""The kube adapter: the only module of the portal that imports ``kubernetes``.

One :class:`KubeClient` per cluster, built from credentials decrypted into memory: its own
``Configuration`` and ``ApiClient`` (never the client's global default configuration, never
``load_kube_config``), the CA passed as ``ca_cert_data`` (in memory, no file), the bearer token
as an API key. A client certificate and key can only be given to Python's ``ssl`` as a *path*,
so they are written to an anonymous in-memory file (``os.memfd_create``) that lives exactly as
long as the client and is never on disk; where memfd does not exist (not Linux) client
certificates are refused with a message saying to use a token.

Every call has a timeout (connect, read), goes through the cluster's rate limiter, and returns
plain dicts (the JSON the API server sent, not the client's model classes, so Volcano objects
and core objects look alike and cost no deserialization). Every failure becomes a
:class:`KubeError` that says in words what went wrong and whether trying again may help; its
message never contains a credential. urllib3's own retries are off: the callers decide what is
worth retrying (dispatch backs off with jitter, the watch relists, the reconcile runs again).

Watches are read line by line from the raw response (``watch=true``) instead of through
``kubernetes.watch.Watch``, which builds a default-configured ``ApiClient`` of its own and
hides 410 Gone behind a silent retry; here a 410 is an event the caller relists on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Protocol
from urllib.parse import quote

import urllib3
from kubernetes import client as k8s
from kubernetes.client.api.apis_api import ApisApi
from kubernetes.client.api.core_v1_api import CoreV1Api
from kubernetes.client.api.custom_objects_api import CustomObjectsApi
from kubernetes.client.api.networking_v1_api import NetworkingV1Api
from kubernetes.client.api.version_api import VersionApi
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

__all__ = [
    "JOB_GROUP",
    "JOB_PLURAL",
    "JOB_VERSION",
    "Connection",
    "KubeClient",
    "KubeError",
    "RateLimiter",
    "WatchEvent",
    "parse_quantity",
]

JOB_GROUP, JOB_VERSION, JOB_PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL = "scheduling.volcano.sh", "v1beta1", "queues"
PODGROUP_PLURAL = "podgroups"
# The resources as RBAC rules and access probes name them ("<plural>.<group>").
RBAC_JOBS = f"{JOB_PLURAL}.{JOB_GROUP}"
RBAC_PODGROUPS = f"{PODGROUP_PLURAL}.{QUEUE_GROUP}"
RBAC_QUEUES = f"{QUEUE_PLURAL}.{QUEUE_GROUP}"
RBAC_INGRESSES = "ingresses.networking.k8s.io"
PROBE_NAME = "gp-connection-test"  # a name no object has: probes read or dry-run it only
_PROBE_BACKEND = {"service": {"name": PROBE_NAME, "port": {"number": 80}}}
FIELD_MANAGER = "gpupool-portal"  # owns the team queues (server-side apply)


class _Unread:
    """What a watch probe hands back in place of the stream it closed unread."""

    data = b""


COMMAND_GROUP, COMMAND_VERSION, COMMAND_PLURAL = "bus.volcano.sh", "v1alpha1", "commands"

TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class RateLimiter(Protocol):
    def acquire(self) -> float: ...


class _NoLimit:
    def acquire(self) -> float:
        return 0.0


@dataclass(frozen=True)
class Connection:
    """How to reach one cluster. Secrets are left out of ``repr``."""

    name: str
    url: str
    ca_pem: str
    token: str | None = field(default=None, repr=False)
    client_cert_pem: str | None = field(default=None, repr=False)
    client_key_pem: str | None = field(default=None, repr=False)
    tls_server_name: str | None = None
    timeout: float = 10.0
    creates_in_flight: int = 16
    # The cluster the portal runs in: its service-account token, read from this file (the
    # kubelet rotates it; see :class:`_TokenFile`).
    token_file: str | None = None


class KubeError(Exception):
    """A failed call, in words. ``kind``: unreachable, tls, timeout, auth, api.

    ``status`` is the HTTP status (None when no response came back), ``reason`` the
    Kubernetes Status reason (``AlreadyExists``, ``NotFound``, ``Forbidden`` …),
    ``retry_after`` the server's Retry-After in seconds, ``unsent`` whether the request
    certainly never reached the API server (see :attr:`changed_nothing`).
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str = "api",
        status: int | None = None,
        reason: str = "",
        retry_after: float | None = None,
        unsent: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        self.unsent = unsent

    @property
    def changed_nothing(self) -> bool:
        """Whether the request certainly changed nothing on the cluster: it never reached the
        API server (host name unresolved, no connection made, the server's TLS certificate
        refused in the handshake), or the server refused it with a 4xx other than 409 (which
        names an object that does exist). A read timeout, a connection reset after sending or
        a 5xx prove nothing: a create may have been applied all the same."""
        if self.unsent:
            return True
        return self.status is not None and 400 <= self.status < 500 and self.status != 409

    @property
    def transient(self) -> bool:
        """Whether the same request may succeed later (network trouble, overload, 5xx)."""
        if self.kind in ("unreachable", "timeout"):
            return True
        return self.status in TRANSIENT_STATUSES

    @property
    def cluster_unreachable(self) -> bool:
        """Whether the request failed for the cluster's sake, not the request's: refused,
        unresolvable, a TLS handshake refused, no answer in time, or the portal's own
        credentials refused (401). Every request to the cluster fails alike until it is back
        (or an admin fixes its registration), so a job waits for it instead of failing."""
        return self.kind in ("unreachable", "tls", "timeout") or self.status == 401

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410


@dataclass(frozen=True)
class WatchEvent:
    """One line of a watch: ADDED, MODIFIED, DELETED or BOOKMARK, with the object as a dict."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


def _retry_after(headers: Any) -> float | None:
    if not headers:
        return None
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _api_error(exc: ApiException, what: str) -> KubeError:
    status = exc.status or None
    if not status:
        # The client turns TLS failures into ApiException(status=0).
        text = str(exc.reason or "")
        if "CERTIFICATE_VERIFY_FAILED" in text or "certificate" in text.lower():
            return KubeError(
                f"{what}: the API server's TLS certificate is not signed by the registered CA "
                "(or does not name this host)",
                kind="tls",
                unsent=True,  # refused in the handshake, before any request was written
            )
        return KubeError(f"{what}: TLS handshake failed", kind="tls")
    reason, message = "", ""
    try:
        body = json.loads(exc.body or "")
        if isinstance(body, dict):
            reason = str(body.get("reason") or "")
            message = str(body.get("message") or "")
    except (TypeError, ValueError):
        pass
    if status == 401:
        return KubeError(
            f"{what}: 401 Unauthorized: the API server does not accept the credentials "
            "(expired or revoked token, or a certificate from another CA)",
            kind="auth",
            status=401,
            reason=reason or "Unauthorized",
        )
    text = message or str(exc.reason or "") or f"HTTP {status}"
    return KubeError(
        f"{what}: {status} {reason or exc.reason or ''}: {text}".replace("  ", " "),
        kind="auth" if status == 403 else "api",
        status=status,
        reason=reason,
        retry_after=_retry_after(exc.headers),
    )


PROXY_READ_SECONDS = 120.0  # a model may think for a while; the portal's worker waits
PROXY_BODY_MAX = 16 * 1024 * 1024  # an answer is relayed whole, so it is bounded


@dataclass(frozen=True)
class ProxyAnswer:
    """What a Service answered through the service proxy (``KubeClient.service_proxy``)."""

    status: int
    content_type: str
    body: bytes
    cluster_error: str = ""
    """The API server's own refusal in its words (a ``Status`` body), "" for the Service's."""


def _status_message(status: int, content_type: str, data: bytes) -> str:
    """The message of a Kubernetes ``Status`` error body, "" for anything else."""
    if status < 400 or "json" not in content_type:
        return ""
    try:
        body = json.loads(data)
    except ValueError:
        return ""
    if isinstance(body, dict) and body.get("kind") == "Status" and body.get("apiVersion") == "v1":
        return str(body.get("message") or body.get("reason") or f"HTTP {status}")
    return ""


def _transport_error(exc: Exception, what: str) -> KubeError:
    inner: BaseException = exc
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        inner = exc.reason
    if isinstance(inner, urllib3.exceptions.SSLError):
        text = str(inner)
        if "CERTIFICATE_VERIFY_FAILED" in text or "match" in text.lower():
            return KubeError(
                f"{what}: the API server's TLS certificate is not signed by the registered CA "
                "(or does not name this host)",
                kind="tls",
                unsent=True,  # refused in the handshake, before any request was written
            )
        return KubeError(f"{what}: TLS handshake failed", kind="tls")
    if isinstance(inner, urllib3.exceptions.NameResolutionError):
        return KubeError(
            f"{what}: the API server's host name does not resolve (DNS)",
            kind="unreachable",
            unsent=True,
        )
    # NewConnectionError subclasses ConnectTimeoutError in urllib3 2: test it first.
    if isinstance(inner, urllib3.exceptions.NewConnectionError | ConnectionError):
        # No connection made: nothing sent. A connection reset (another ConnectionError) may
        # come after the request was written.
        unsent = isinstance(inner, urllib3.exceptions.NewConnectionError | ConnectionRefusedError)
        return KubeError(
            f"{what}: the API server is unreachable (connection refused or no route)",
            kind="unreachable",
            unsent=unsent,
        )
    if isinstance(inner, urllib3.exceptions.TimeoutError):
        return KubeError(
            f"{what}: the API server did not answer in time",
            kind="timeout",
            unsent=isinstance(inner, urllib3.exceptions.ConnectTimeoutError),
        )
    return KubeError(f"{what}: the connection to the API server failed", kind="unreachable")


def _memfd_pem(pem: str) -> tuple[int, str]:
    """An anonymous in-memory file holding ``pem``: (fd, a path ``ssl`` can open)."""
    if not hasattr(os, "memfd_create"):
        raise KubeError(
            "client-certificate authentication needs Linux (memfd_create) so the key never "
            "touches disk; register the cluster with a service-account token instead",
            kind="auth",
        )
    fd = os.memfd_create("gpupool-client-cert", os.MFD_CLOEXEC)
    os.write(fd, pem.encode("ascii"))
    return fd, f"/proc/self/fd/{fd}"


class _TokenFile:
    """A projected service-account token: the kubelet replaces the file before the token
    expires (about hourly), so the client re-reads it whenever the file changed, checked with
    one ``stat`` before each request (the client's ``refresh_api_key_hook``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None

    def read(self) -> str:
        try:
            st = os.stat(self.path)
            with open(self.path, encoding="ascii") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise KubeError(
                f"the service-account token cannot be read: {exc.__class__.__name__}", kind="auth"
            ) from None
        self._seen = (st.st_mtime_ns, st.st_ino)
        return token

    def refresh(self, cfg: Any) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            return  # keep the token in hand; the API server says when it stops working
        if (st.st_mtime_ns, st.st_ino) != self._seen:
            cfg.api_key["authorization"] = self.read()


class KubeClient:
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

    # -- plumbing --------------------------------------------------------------------------
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

    # -- discovery -------------------------------------------------------------------------
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

    # -- core ------------------------------------------------------------------------------
    def list_nodes(self) -> list[dict[str, Any]]:
        return self._list("listing nodes", self.core.list_node)

    def list_nodes_with_version(self) -> tuple[list[dict[str, Any]], str]:
        return self._list_rv("listing nodes", self.core.list_node)

    def list_pods(
        self, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {}
        if label_selector:
            kwargs["label_selector"] = label_selector
        if field_selector:
            kwargs["field_selector"] = field_selector
        return self._list("listing pods", self.core.list_pod_for_all_namespaces, **kwargs)

    def list_pods_with_version(self, *, label_selector: str) -> tuple[list[dict[str, Any]], str]:
        return self._list_rv(
            "listing pods", self.core.list_pod_for_all_namespaces, label_selector=label_selector
        )

    def get_namespace(self, name: str) -> dict[str, Any]:
        return dict(self._call(f"reading namespace {name}", self.core.read_namespace, name))

    def read_config_map(self, namespace: str, name: str) -> dict[str, Any]:
        """One ConfigMap (the cluster doctor reads Volcano's scheduler configuration)."""
        return dict(
            self._call(
                f"reading configmap {namespace}/{name}",
                self.core.read_namespaced_config_map,
                name,
                namespace,
            )
        )

    def create_namespace(self, name: str, *, labels: dict[str, str]) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": labels},
        }
        return dict(self._call(f"creating namespace {name}", self.core.create_namespace, body))

    def read_pod_log(
        self,
        namespace: str,
        pod: str,
        *,
        tail_lines: int | None = None,
        limit_bytes: int = 0,
        since_seconds: int | None = None,
        timestamps: bool = False,
        previous: bool = False,
    ) -> str:
        """A pod's log as text (never JSON-decoded, even when a line happens to be JSON)."""
        kwargs: dict[str, Any] = {}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        if limit_bytes:
            kwargs["limit_bytes"] = limit_bytes
        if since_seconds is not None:
            kwargs["since_seconds"] = since_seconds
        if timestamps:
            kwargs["timestamps"] = True
        if previous:
            kwargs["previous"] = True
        what = f"reading the log of pod {pod}"
        self.limiter.acquire()
        try:
            resp = self.core.read_namespaced_pod_log(
                pod, namespace, _preload_content=False, _request_timeout=self.timeout, **kwargs
            )
            data = resp.data
        except ApiException as exc:
            raise _api_error(exc, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _transport_error(exc, what) from None
        return bytes(data or b"").decode("utf-8", "replace")

    def stream_pod_log(
        self, namespace: str, pod: str, *, timestamps: bool = False, previous: bool = False
    ) -> Iterator[bytes]:
        """A pod's whole log, in chunks as the API server sends them (a download: it is never
        held in memory). Errors before the first byte raise KubeError; a connection lost
        midway ends the chunks early."""
        what = f"reading the log of pod {pod}"
        self.limiter.acquire()
        try:
            resp = self.core.read_namespaced_pod_log(
                pod,
                namespace,
                _preload_content=False,
                _request_timeout=self.timeout,
                timestamps=timestamps or None,
                previous=previous or None,
            )
        except ApiException as exc:
            raise _api_error(exc, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _transport_error(exc, what) from None

        def chunks() -> Iterator[bytes]:
            try:
                yield from resp.stream(64 * 1024)
            except (urllib3.exceptions.HTTPError, OSError):
                log.warning("%s: the connection was lost midway", what)
            finally:
                resp.release_conn()

        return chunks()

    # -- access probes (the connection test) -----------------------------------------------
    def access_probe(self, resource: str, verb: str, namespace: str) -> None:
        """One harmless request that only a grant of ``verb`` on ``resource`` lets through.

        ``resource`` is spelled as RBAC names it (``jobs.batch.volcano.sh``, ``pods/log``).
        Authorization answers before anything else on an API server, so only a 403 means
        "not granted": a 404 for a name that does not exist, or an admission error on a dry
        run, proves the verb. Raises KubeError as every call does; ValueError for a pair the
        portal never uses.
        """
        probe = self._probes(namespace).get((resource, verb))
        if probe is None:
            raise ValueError(f"no probe for {verb} {resource}")
        probe()

    def _probes(self, ns: str) -> dict[tuple[str, str], Any]:
        core, custom, name = self.core, self.custom, PROBE_NAME
        every = custom.list_cluster_custom_object
        jobs = (JOB_GROUP, JOB_VERSION, JOB_PLURAL)
        queues = (QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL)
        podgroups = (QUEUE_GROUP, QUEUE_VERSION, PODGROUP_PLURAL)
        job = {
            "apiVersion": f"{JOB_GROUP}/{JOB_VERSION}",
            "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"queue": "default", "tasks": []},
        }
        queue = {
            "apiVersion": f"{QUEUE_GROUP}/{QUEUE_VERSION}",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"weight": 1},
        }
        j, pg, q = RBAC_JOBS, RBAC_PODGROUPS, RBAC_QUEUES
        call, opens = self._call, self._watch_opens
        return {
            (j, "create"): lambda: self.dry_run_create_job(ns, job),
            (j, "get"): lambda: self.get_job(ns, name),
            (j, "list"): lambda: call("listing Volcano Jobs", every, *jobs, limit=1),
            (j, "watch"): lambda: opens("watching Volcano Jobs", every, *jobs),
            (j, "delete"): lambda: self.delete_job(ns, name, dry_run=True),
            ("pods", "get"): lambda: call("reading a pod", core.read_namespaced_pod, name, ns),
            ("pods", "list"): lambda: call(
                "listing pods", core.list_pod_for_all_namespaces, limit=1
            ),
            ("pods", "watch"): lambda: opens("watching pods", core.list_pod_for_all_namespaces),
            ("pods/log", "get"): lambda: self.read_pod_log(ns, name, tail_lines=1),
            ("events", "list"): lambda: call(
                "listing events", core.list_namespaced_event, ns, limit=1
            ),
            (pg, "get"): lambda: call(
                "reading a PodGroup",
                custom.get_namespaced_custom_object,
                QUEUE_GROUP,
                QUEUE_VERSION,
                ns,
                PODGROUP_PLURAL,
                name,
            ),
            (pg, "list"): lambda: call("listing PodGroups", every, *podgroups, limit=1),
            (q, "get"): lambda: self.get_queue(name),
            (q, "list"): lambda: call("listing Volcano Queues", every, *queues, limit=1),
            (q, "create"): lambda: call(
                "creating a Volcano Queue (dry run)",
                custom.create_cluster_custom_object,
                *queues,
                queue,
                dry_run="All",
            ),
            (q, "patch"): lambda: self.apply_queue(
                queue, field_manager=FIELD_MANAGER, dry_run=True
            ),
            ("services", "create"): lambda: call(
                "creating a Service (dry run)",
                core.create_namespaced_service,
                ns,
                {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}},
                dry_run="All",
            ),
            ("services", "delete"): lambda: call(
                "deleting a Service (dry run)",
                core.delete_namespaced_service,
                name,
                ns,
                dry_run="All",
            ),
            (RBAC_INGRESSES, "create"): lambda: call(
                "creating an Ingress (dry run)",
                self.networking.create_namespaced_ingress,
                ns,
                {"metadata": {"name": name}, "spec": {"defaultBackend": _PROBE_BACKEND}},
                dry_run="All",
            ),
            (RBAC_INGRESSES, "delete"): lambda: call(
                "deleting an Ingress (dry run)",
                self.networking.delete_namespaced_ingress,
                name,
                ns,
                dry_run="All",
            ),
            ("nodes", "get"): lambda: call("reading a node", core.read_node, name),
            ("nodes", "list"): lambda: call("listing nodes", core.list_node, limit=1),
            ("nodes", "watch"): lambda: opens("watching nodes", core.list_node),
        }

    def _watch_opens(self, what: str, fn: Any, *args: Any) -> None:
        """Open a watch and close it unread: authorization answers before the stream starts,
        so a 200 proves the verb without waiting for an event (timeoutSeconds=1 frees the
        server)."""

        def open_and_close(*a: Any, **kw: Any) -> Any:
            resp = fn(*a, **kw)
            resp.close()
            resp.release_conn()
            return _Unread()

        self._call(what, open_and_close, *args, watch=True, timeout_seconds=1)

    # -- Serving: an inference job's Service and Ingress ------------------------------------
    def create_service(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create a core v1 Service (strict field validation, as for Volcano Jobs)."""
        return dict(
            self._call(
                f"creating Service {manifest['metadata']['name']}",
                self.core.create_namespaced_service,
                namespace,
                manifest,
                field_validation="Strict",
            )
        )

    def delete_service(self, namespace: str, name: str) -> None:
        self._call(f"deleting Service {name}", self.core.delete_namespaced_service, name, namespace)

    def service_proxy(
        self,
        namespace: str,
        service: str,
        port: int,
        *,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: bytes = b"",
        content_type: str = "",
        accept: str = "",
    ) -> ProxyAnswer:
        """One HTTP request to a Service through the API server's service proxy
        (``services/{name}:{port}/proxy/{path}``), as ``kubectl port-forward svc/…`` reaches a
        Service without a route to the cluster's network.

        The answer is the Service's, whatever its status; ``cluster_error`` is set when the
        API server itself refused (a Status body: no such Service, no Ready endpoint, RBAC).
        ``path`` is sent as given, each segment percent-encoded: the caller has refused ``.``
        and ``..`` segments, which would leave the proxy for other API paths."""
        what = f"calling Service {namespace}/{service} through the API server"
        resource = "/api/v1/namespaces/{namespace}/services/{name}/proxy/" + quote(
            path.lstrip("/"), safe="/-._~!$&'()*+,;=:@"
        )
        headers = {"Accept": accept or "*/*"}
        payload: Any = None
        if method not in ("GET", "HEAD", "OPTIONS") and (body or content_type):
            # The client JSON-encodes what it sends as JSON, so JSON goes in decoded
            # (ValueError for a body that is not JSON); any other type goes as bytes.
            headers["Content-Type"] = content_type or "application/octet-stream"
            mime = headers["Content-Type"].split(";")[0].strip().lower()
            json_body = mime == "application/json" or mime.endswith("+json")
            payload = (json.loads(body) if body else None) if json_body else body
        method_, url, headers_, body_, _ = self.api.param_serialize(
            method=method,
            resource_path=resource,
            path_params={"namespace": namespace, "name": f"{service}:{port}"},
            query_params=query,
            header_params=headers,
            body=payload,
            auth_settings=["BearerToken"],
        )
        self.limiter.acquire()
        try:
            resp = self.api.call_api(
                method_,
                url,
                header_params=headers_,
                body=body_,
                _request_timeout=(self.timeout[0], PROXY_READ_SECONDS),
            )
            raw = resp.response
            data = raw.read(PROXY_BODY_MAX + 1, decode_content=True)
            raw.release_conn()
        except ApiException as exc:
            raise _api_error(exc, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _transport_error(exc, what) from None
        if len(data) > PROXY_BODY_MAX:
            raise KubeError(f"{what}: the answer is larger than {PROXY_BODY_MAX} bytes")
        answer_type = str(resp.headers.get("Content-Type") or "")
        return ProxyAnswer(
            status=resp.status,
            content_type=answer_type,
            body=bytes(data),
            cluster_error=_status_message(resp.status, answer_type, data),
        )

    def create_ingress(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create a ``networking.k8s.io/v1`` Ingress."""
        return dict(
            self._call(
                f"creating Ingress {manifest['metadata']['name']}",
                self.networking.create_namespaced_ingress,
                namespace,
                manifest,
                field_validation="Strict",
            )
        )

    def delete_ingress(self, namespace: str, name: str) -> None:
        self._call(
            f"deleting Ingress {name}",
            self.networking.delete_namespaced_ingress,
            name,
            namespace,
        )

    # -- Volcano Jobs ----------------------------------------------------------------------
    def create_job(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create a Volcano Job (strict field validation: an unknown field is an error)."""
        with self._creates:
            return dict(
                self._call(
                    f"creating Volcano Job {manifest['metadata']['name']}",
                    self.custom.create_namespaced_custom_object,
                    JOB_GROUP,
                    JOB_VERSION,
                    namespace,
                    JOB_PLURAL,
                    manifest,
                    field_validation="Strict",
                )
            )

    def dry_run_create_job(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        return dict(
            self._call(
                "creating a Volcano Job (dry run)",
                self.custom.create_namespaced_custom_object,
                JOB_GROUP,
                JOB_VERSION,
                namespace,
                JOB_PLURAL,
                manifest,
                dry_run="All",
            )
        )

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(
            self._call(
                f"reading Volcano Job {name}",
                self.custom.get_namespaced_custom_object,
                JOB_GROUP,
                JOB_VERSION,
                namespace,
                JOB_PLURAL,
                name,
            )
        )

    def delete_job(
        self,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        dry_run: bool = False,
        wait_for_pods: bool = False,
    ) -> None:
        """Delete with background propagation (the Job goes now, its pods follow), or with
        ``wait_for_pods`` in the foreground: the Job stays, marked for deletion, until its
        pods are gone, so that while it can still be read its GPUs are still taken.

        With ``uid`` the API server deletes only that incarnation of the name (a precondition),
        so a late cleanup can never remove a newer object that reused the name.
        """
        kwargs: dict[str, Any] = {
            "propagation_policy": "Foreground" if wait_for_pods else "Background"
        }
        if uid:
            kwargs["body"] = {"preconditions": {"uid": uid}}
        if dry_run:
            kwargs["dry_run"] = "All"
        self._call(
            f"deleting Volcano Job {name}",
            self.custom.delete_namespaced_custom_object,
            JOB_GROUP,
            JOB_VERSION,
            namespace,
            JOB_PLURAL,
            name,
            **kwargs,
        )

    def list_jobs_with_version(self, *, label_selector: str) -> tuple[list[dict[str, Any]], str]:
        return self._list_rv(
            "listing Volcano Jobs",
            self.custom.list_cluster_custom_object,
            JOB_GROUP,
            JOB_VERSION,
            JOB_PLURAL,
            label_selector=label_selector,
        )

    def list_jobs_in(self, namespace: str, *, limit: int = 1) -> list[dict[str, Any]]:
        data = self._call(
            f"listing Volcano Jobs in {namespace}",
            self.custom.list_namespaced_custom_object,
            JOB_GROUP,
            JOB_VERSION,
            namespace,
            JOB_PLURAL,
            limit=limit,
        )
        return list(data.get("items") or [])

    def list_podgroups(self, *, label_selector: str) -> list[dict[str, Any]]:
        return self._list(
            "listing PodGroups",
            self.custom.list_cluster_custom_object,
            QUEUE_GROUP,
            QUEUE_VERSION,
            PODGROUP_PLURAL,
            label_selector=label_selector,
        )

    # -- Volcano Queues --------------------------------------------------------------------
    def apply_queue(
        self, manifest: dict[str, Any], *, field_manager: str, dry_run: bool = False
    ) -> dict[str, Any]:
        """Server-side apply of a Queue under ``field_manager`` (force: the portal owns them)."""
        name = manifest["metadata"]["name"]
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return dict(
            self._call(
                f"applying Volcano Queue {name}",
                self.custom.patch_cluster_custom_object,
                QUEUE_GROUP,
                QUEUE_VERSION,
                QUEUE_PLURAL,
                name,
                manifest,
                field_manager=field_manager,
                force=True,
                _content_type="application/apply-patch+yaml",
                **extra,
            )
        )

    def get_queue(self, name: str) -> dict[str, Any]:
        return dict(
            self._call(
                f"reading Volcano Queue {name}",
                self.custom.get_cluster_custom_object,
                QUEUE_GROUP,
                QUEUE_VERSION,
                QUEUE_PLURAL,
                name,
            )
        )

    def list_queues(self, *, label_selector: str | None = None) -> list[dict[str, Any]]:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        return self._list(
            "listing Volcano Queues",
            self.custom.list_cluster_custom_object,
            QUEUE_GROUP,
            QUEUE_VERSION,
            QUEUE_PLURAL,
            **kwargs,
        )

    def create_command(
        self, namespace: str, manifest: dict[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any]:
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return dict(
            self._call(
                f"creating Volcano Command {manifest['metadata']['name']}",
                self.custom.create_namespaced_custom_object,
                COMMAND_GROUP,
                COMMAND_VERSION,
                namespace,
                COMMAND_PLURAL,
                manifest,
                **extra,
            )
        )

    # -- lists and watches -----------------------------------------------------------------
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

    def watch(
        self,
        resource: str,
        *,
        label_selector: str,
        resource_version: str,
        timeout_seconds: int = 300,
        stop: threading.Event | None = None,
    ) -> Iterator[WatchEvent]:
        """Events after ``resource_version`` (``jobs`` or ``pods``, all namespaces; ``nodes``).

        Ends when the server closes the stream (``timeout_seconds``) or ``stop`` is set.
        Raises :class:`KubeError` with ``gone`` for 410 (the version is too old: relist). An
        empty ``label_selector`` follows every object (nodes carry no portal label).
        """
        kwargs: dict[str, Any] = {
            "watch": True,
            "allow_watch_bookmarks": True,
            "timeout_seconds": timeout_seconds,
        }
        if label_selector:
            kwargs["label_selector"] = label_selector
        if resource_version:
            kwargs["resource_version"] = resource_version
        if resource == "jobs":
            fn: Any = self.custom.list_cluster_custom_object
            args: tuple[Any, ...] = (JOB_GROUP, JOB_VERSION, JOB_PLURAL)
        elif resource == "pods":
            fn, args = self.core.list_pod_for_all_namespaces, ()
        elif resource == "nodes":
            fn, args = self.core.list_node, ()
        else:
            raise ValueError(f"cannot watch {resource!r}")
        what = f"watching {resource}"
        self.limiter.acquire()
        try:
            resp = fn(
                *args,
                _preload_content=False,
                _request_timeout=(self.timeout[0], timeout_seconds + self.timeout[1]),
                **kwargs,
            )
        except ApiException as exc:
            raise _api_error(exc, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _transport_error(exc, what) from None
        with self._streams_lock:
            self._streams.add(resp)
        try:
            for line in iter_resp_lines(resp):
                if stop is not None and stop.is_set():
                    return
                if not line or line.isspace():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    code = int(obj.get("code") or 0)
                    raise KubeError(
                        f"{what}: {code} {obj.get('reason', '')}: {obj.get('message', '')}",
                        status=code or None,
                        reason=str(obj.get("reason") or ""),
                    )
                yield WatchEvent(str(kind), obj)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if stop is not None and stop.is_set():
                return
            raise _transport_error(exc, what) from None
        finally:
            with self._streams_lock:
                self._streams.discard(resp)
            with contextlib.suppress(Exception):
                resp.close()
                resp.release_conn()

    def abort_streams(self) -> None:
        """End every open watch of this client now (a blocked read returns), for shutdown."""
        with self._streams_lock:
            streams = list(self._streams)
        for resp in streams:
            with contextlib.suppress(Exception):
                resp.shutdown()
