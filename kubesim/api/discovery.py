"""Discovery, OpenAPI and metrics: what clients read about the API before (or instead of)
its objects: ``/version``, ``/api``, ``/apis``, ``/openapi/v2|v3`` and ``metrics.k8s.io``
(what ``kubectl top`` reads). None of it touches a stored object's write path.
"""

from __future__ import annotations

from typing import Any

from kubesim import metrics as metrics_api
from kubesim.api.wire import JSON, Request, Response
from kubesim.auth import Principal
from kubesim.errors import ApiError, forbidden, method_not_allowed, not_found
from kubesim.selectors import parse_label_selector


class DiscoveryMixin:
    """Mixed into :class:`kubesim.api.core.Api`, whose ``__init__`` sets the state it reads."""

    def version_info(self) -> dict[str, str]:
        """``/version``: what the server claims to be."""
        return {
            "major": "1",
            "minor": "31",
            "gitVersion": "v1.31.0-kubesim",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2024-08-13T00:00:00Z",
            "goVersion": "go1.22.5",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources = []
        for rt in self.types.groups().get(group, []):
            if rt.version != version:
                continue
            entry = {
                "name": rt.plural,
                "singularName": rt.singular,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": sorted(rt.verbs),
            }
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            resources.append(entry)
            for sub in rt.subresources:
                verbs = ["get"] if sub == "log" else ["get", "patch", "update"]
                kind = "Pod" if sub == "log" else rt.kind
                resources.append(
                    {
                        "name": f"{rt.plural}/{sub}",
                        "singularName": "",
                        "namespaced": rt.namespaced,
                        "kind": kind,
                        "verbs": verbs,
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    def _group(self, group: str) -> dict[str, Any]:
        versions = sorted({rt.version for rt in self.types.groups()[group]})
        gv = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": gv,
            "preferredVersion": gv[0],
        }

    def discovery(self, parts: list[str]) -> dict[str, Any]:
        """``/api``, ``/api/v1``, ``/apis``, ``/apis/{group}``, ``/apis/{group}/{version}``."""
        groups = self.types.groups()
        if parts == ["api"]:
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}
                ],
            }
        if parts == ["api", "v1"]:
            return self._resource_list("", "v1")
        if parts == ["apis"]:
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [self._group(g) for g in sorted(groups) if g] + [metrics_api.api_group()],
            }
        group = parts[1]
        if group == metrics_api.GROUP:
            if len(parts) == 2:
                return metrics_api.api_group()
            if parts[2] == metrics_api.VERSION:
                return metrics_api.resource_list()
        if group not in groups or not group:
            raise self._no_route()
        if len(parts) == 2:
            return self._group(group)
        if parts[2] not in {rt.version for rt in groups[group]}:
            raise self._no_route()
        return self._resource_list(group, parts[2])

    def _openapi(self, req: Request, parts: list[str]) -> Response:
        """``/openapi/v2`` (JSON only) and ``/openapi/v3[/<group-version>]``."""
        if parts == ["v2"]:
            accept = req.headers.get("accept", "")
            if accept and "json" not in accept and "*/*" not in accept:
                raise ApiError(
                    406,
                    "NotAcceptable",
                    "only the following media types are accepted: application/json",
                    details={},
                )
            return Response(200, self.openapi.v2(), JSON)
        if parts == ["v3"]:
            return self._ok(self.openapi.v3_index())
        if parts[:1] == ["v3"]:
            body = self.openapi.v3("/".join(parts[1:]))
            if body is not None:
                return Response(200, body, JSON, {"Cache-Control": "public, immutable"})
        raise self._no_route()

    def _metrics(self, req: Request, principal: Principal, parts: list[str]) -> Response:
        """``metrics.k8s.io/v1beta1`` nodes and pods (what ``kubectl top`` reads)."""
        namespace = None
        if len(parts) >= 3 and parts[0] == "namespaces" and parts[2] == "pods":
            namespace, parts = parts[1], parts[2:]
        if not parts or parts[0] not in ("nodes", "pods") or len(parts) > 2:
            raise self._no_route()
        resource, name = parts[0], parts[1] if len(parts) == 2 else None
        if req.method != "GET":
            raise method_not_allowed()
        verb = "get" if name else "list"
        if not principal.allows(verb, metrics_api.GROUP, resource, namespace):
            raise forbidden(principal.user, verb, resource, metrics_api.GROUP, namespace, name)
        label = parse_label_selector(req.query.get("labelSelector"))
        with self.store.lock:
            if resource == "pods":
                pods = [
                    p
                    for p in self.store.select(self.types.pods, namespace)
                    if metrics_api.running(p)
                    and (name is None or p["metadata"]["name"] == name)
                    and label.matches(p["metadata"].get("labels"))
                ]
                items = [metrics_api.pod_metrics(p) for p in pods]
            else:
                on_node: dict[str, list[dict[str, Any]]] = {}
                for pod in self.store.select(self.types.pods):
                    node_name = (pod.get("spec") or {}).get("nodeName")
                    if node_name and metrics_api.running(pod):
                        on_node.setdefault(node_name, []).append(pod)
                items = [
                    metrics_api.node_metrics(n, on_node.get(n["metadata"]["name"], []))
                    for n in self.store.select(self.types.nodes)
                    if (name is None or n["metadata"]["name"] == name)
                    and label.matches(n["metadata"].get("labels"))
                ]
        items.sort(key=lambda m: (m["metadata"].get("namespace", ""), m["metadata"]["name"]))
        if name is not None:
            if not items:
                raise not_found(resource, metrics_api.GROUP, name)
            return self._ok(items[0])
        kind = "PodMetrics" if resource == "pods" else "NodeMetrics"
        return self._ok(metrics_api.metrics_list(kind, items))
