"""Serving: an inference job's Service and Ingress, and requests relayed to it through the
API server's service proxy (bounded in time and size, the cluster's refusals told apart from
the Service's own answers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes.client.exceptions import ApiException

from clusters.kube.errors import KubeError, _api_error, _status_message, _transport_error

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


class ServingMixin:
    """Mixed into :class:`clusters.kube.client.KubeClient`, whose ``__init__`` builds the API
    objects these calls use."""

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
