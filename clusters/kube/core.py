"""Core v1 calls: nodes, pods, namespaces, config maps and pod logs (read whole or streamed)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from clusters.kube.errors import _api_error, _transport_error

log = logging.getLogger(__name__)


class CoreMixin:
    """Mixed into :class:`clusters.kube.client.KubeClient`, whose ``__init__`` builds the API
    objects these calls use."""

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
