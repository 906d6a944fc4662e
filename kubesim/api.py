"""The Kubernetes REST API over the store: routing, verbs, validation and watch streams.

This module knows nothing about sockets: :meth:`Api.handle` takes a :class:`Request` and
returns a :class:`Response` (a body, or a streaming callback for watches and followed logs).
The HTTP server in :mod:`kubesim.server` only moves bytes.

Request pipeline, in the apiserver's order: authenticate (401) -> route (404) -> authorize
(403) -> injected faults -> decode -> prune unknown fields (Strict: 400) -> defaults -> schema
and name validation (422) -> Volcano admission webhooks (400) -> store (404/409) -> response.
"""

from __future__ import annotations

import json
import logging
import queue as queue_mod
import random
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, unquote

import yaml

from kubesim import admission
from kubesim import metrics as metrics_api
from kubesim.auth import Authenticator, Principal
from kubesim.clock import wall_text
from kubesim.errors import (
    ApiError,
    bad_request,
    conflict,
    forbidden,
    from_code,
    gone,
    invalid,
    method_not_allowed,
    not_found,
    unauthorized,
    unsupported_media_type,
)
from kubesim.faults import FaultInjector
from kubesim.objects import clone
from kubesim.openapi import OpenAPI
from kubesim.operator import DCGM_EXPORTER, DEVICE_PLUGIN, operator_log
from kubesim.patch import (
    json_patch,
    manager_from_user_agent,
    merge_patch,
    record_update,
    server_side_apply,
)
from kubesim.runtime import BUILTIN_NAMESPACES
from kubesim.schema import OBJECT_META_FIELDS
from kubesim.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from kubesim.serving import inference_answer, ready, service_port, split_service
from kubesim.sim import Simulation
from kubesim.store import Entry, ResourceType, Watcher, WatchEvent
from kubesim.tables import TABLE_MEDIA, wants_table
from kubesim.tables import row_for as table_row
from kubesim.tables import table as make_table
from kubesim.validation import (
    configmap_causes,
    configmap_update_causes,
    ingress_causes,
    metadata_causes,
    secret_admitted,
    secret_causes,
    service_admitted,
    service_causes,
    service_name_causes,
)

log = logging.getLogger("kubesim")

JSON = "application/json"
PATCH_TYPES = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
]
_SERVER_META = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
)
_IMMUTABLE_META = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)


@dataclass
class Request:
    """An HTTP request, already split into parts."""

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""
    cert_user: str | None = None
    """The CN of the client certificate the TLS handshake verified, if one was sent."""

    @classmethod
    def build(
        cls,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes,
        cert_user: str | None = None,
    ) -> Request:
        """Parse ``/path?query`` (last value of a repeated parameter wins)."""
        path, _, raw_query = target.partition("?")
        query = {k: v[-1] for k, v in parse_qs(raw_query, keep_blank_values=True).items()}
        return cls(method.upper(), unquote(path), query, headers, body, cert_user)


class StreamWriter:
    """What a streaming response may do with the connection."""

    def send(self, data: bytes) -> None:  # pragma: no cover - interface
        """Write one chunk; raises OSError when the client is gone."""
        raise NotImplementedError

    def gone(self) -> bool:  # pragma: no cover - interface
        """Whether the client closed the connection."""
        raise NotImplementedError


@dataclass
class Response:
    """A full body, or a ``stream`` callback that writes chunks itself."""

    status: int
    body: bytes = b""
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)
    stream: Callable[[StreamWriter], None] | None = None


# The service proxy's RBAC verb for each HTTP method, as a real API server authorizes it.
_PROXY_VERBS = {
    "GET": "get",
    "HEAD": "get",
    "OPTIONS": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


@dataclass
class Route:
    """Where a path points."""

    kind: str  # version | health | discovery | resource | proxy | control | openapi | metrics
    rt: ResourceType | None = None
    namespace: str | None = None
    name: str | None = None
    sub: str | None = None
    parts: list[str] = field(default_factory=list)


_INT = re.compile(r"-?[0-9]{1,18}")


def _is_int(value: str) -> bool:
    """A whole number in ASCII digits (``str.isdigit`` also takes "¹", which ``int`` refuses)."""
    return _INT.fullmatch(value) is not None


def _true(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1", "yes")


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _random_suffix() -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(random.choice(alphabet) for _ in range(5))  # noqa: S311 - names, not secrets


class Api:
    """Serves one simulated cluster."""

    def __init__(
        self,
        sim: Simulation,
        auth: Authenticator,
        faults: FaultInjector,
        control: Callable[[Request, list[str]], Response] | None = None,
    ) -> None:
        self.sim = sim
        self.store = sim.store
        self.types = sim.types
        self.auth = auth
        self.faults = faults
        self.control = control
        self.requests = 0
        self.cpu_seconds = 0.0  # thread CPU spent in handle(), for the benchmark
        self._admitted: dict[Any, tuple[dict[str, Any], list[str], list[dict[str, str]]]] = {}
        self._admitted_lock = threading.Lock()
        self._proxy_turn = 0  # the service proxy's round robin over Ready endpoints
        self.openapi = OpenAPI(self.types.all)

    # ==================================================================================
    # entry point
    # ==================================================================================
    def handle(self, req: Request) -> Response:
        """Answer one request; every failure becomes a Status body."""
        self.requests += 1
        sim = self.sim
        sim.api_inflight += 1
        sim.last_api_request = time.monotonic()
        started = time.thread_time()
        try:
            return self._handle(req)
        finally:
            sim.api_inflight -= 1
            self.cpu_seconds += time.thread_time() - started

    def _handle(self, req: Request) -> Response:
        try:
            principal = self.auth.authenticate(req.headers.get("authorization"), req.cert_user)
            route = self.route(req.path)
            if principal is None and route.kind not in ("version", "health"):
                raise unauthorized()
            if route.kind == "version":
                return self._ok(self.version_info())
            if route.kind == "health":
                return Response(200, b"ok", "text/plain; charset=utf-8")
            if route.kind == "discovery":
                return self._ok(self.discovery(route.parts))
            if route.kind == "openapi":
                return self._openapi(req, route.parts)
            if route.kind == "metrics":
                assert principal is not None
                return self._metrics(req, principal, route.parts)
            if route.kind == "control":
                assert principal is not None
                if not principal.admin:
                    raise forbidden(
                        principal.user, req.method.lower(), "kubesim", "kubesim.dev", None, None
                    )
                if self.control is None:
                    raise not_found("kubesim", "", req.path)
                return self.control(req, route.parts)
            assert principal is not None and route.rt is not None
            if route.kind == "proxy":
                verb = _PROXY_VERBS.get(req.method, "")
                if not verb:
                    raise method_not_allowed()
                self._authorize(principal, verb, route)
                self._faults(verb, route)
                return self.service_proxy(req, route)
            verb = self._verb(req, route)
            self._authorize(principal, verb, route)
            self._faults(verb, route)
            return self._dispatch(req, route, verb)
        except ApiError as err:
            return self.error(err)
        except SelectorError as err:
            return self.error(bad_request(str(err)))
        except Exception as err:
            log.exception("kubesim: internal error on %s %s", req.method, req.path)
            return self.error(ApiError(500, "InternalError", f"Internal error occurred: {err}"))

    def error(self, err: ApiError) -> Response:
        """A Status response."""
        return Response(err.code, _json(err.status()), JSON, dict(err.headers))

    def _ok(self, obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        return Response(status, _json(obj), JSON, headers or {})

    # ==================================================================================
    # routing
    # ==================================================================================
    def route(self, path: str) -> Route:
        """Map a URL path onto a route (404 for anything unknown)."""
        parts = [p for p in path.split("/") if p]
        if parts == ["version"]:
            return Route("version")
        if parts and parts[0] in ("healthz", "livez", "readyz"):
            return Route("health")
        if parts[:2] == ["kubesim", "v1"]:
            return Route("control", parts=parts[2:])
        if parts[:1] == ["openapi"]:
            return Route("openapi", parts=parts[1:])
        if parts[:3] == ["apis", metrics_api.GROUP, metrics_api.VERSION] and len(parts) > 3:
            return Route("metrics", parts=parts[3:])
        if parts[:1] == ["api"] and len(parts) <= 2:
            return Route("discovery", parts=parts)
        if parts[:1] == ["apis"] and len(parts) <= 3:
            return Route("discovery", parts=parts)
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"]:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise self._no_route()
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            rt = self.types.lookup(group, version, rest[2])
            if rt is not None and rt.namespaced:
                namespace, rest = rest[1], rest[2:]
        if not rest:
            raise self._no_route()
        if (
            group == ""
            and namespace is not None
            and rest[0] == "services"
            and rest[2:3] == ["proxy"]
        ):  # the service proxy: services/{name[:port]}/proxy/{any path}
            return Route("proxy", self.types.services, namespace, rest[1], "proxy")
        rt = self.types.lookup(group, version, rest[0])
        if rt is None:
            raise self._no_route()
        if rt.namespaced and namespace is None and len(rest) > 1:
            raise self._no_route()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3 or (sub is not None and sub not in rt.subresources):
            raise self._no_route()
        return Route("resource", rt, namespace, name, sub)

    @staticmethod
    def _no_route() -> ApiError:
        return ApiError(
            404, "NotFound", "the server could not find the requested resource", details={}
        )

    def _verb(self, req: Request, route: Route) -> str:
        method = req.method
        if method == "GET":
            if route.name is None:
                return "watch" if _true(req.query.get("watch")) else "list"
            return "get"
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method)
        if method == "DELETE":
            verb = "delete" if route.name is not None else "deletecollection"
        if verb is None:
            raise method_not_allowed()
        if verb == "create" and route.name is not None:
            raise method_not_allowed()
        if verb in ("update", "patch") and route.name is None:
            raise method_not_allowed()
        return verb

    def _authorize(self, principal: Principal, verb: str, route: Route) -> None:
        rt = route.rt
        assert rt is not None
        resource = f"{rt.plural}/{route.sub}" if route.sub else rt.plural
        if not principal.allows(verb, rt.group, resource, route.namespace):
            raise forbidden(principal.user, verb, resource, rt.group, route.namespace, route.name)

    def _faults(self, verb: str, route: Route) -> None:
        rt = route.rt
        assert rt is not None
        fault = self.faults.take(
            ("error", "hang"), verb, rt.plural, rt.group, route.sub, route.namespace, route.name
        )
        if fault is None:
            return
        if fault.hang:
            time.sleep(fault.hang)  # wall time: the client's timeout is what is being tested
        if fault.status is not None:
            err = from_code(fault.status, fault.message, fault.retry_after)
            if fault.status == 409 and verb == "create":
                err.reason = "AlreadyExists"
            raise err

    def _dispatch(self, req: Request, route: Route, verb: str) -> Response:
        rt = route.rt
        assert rt is not None
        check = verb
        if route.sub == "log":
            check = "get" if verb == "get" else verb
        elif route.sub == "status":
            check = {"get": "get", "update": "update", "patch": "patch"}.get(verb, "none")
        if check not in rt.verbs:
            raise method_not_allowed()
        if route.sub == "log":
            return self.pod_log(req, route)
        if wants_table(req.headers.get("accept")) and verb in ("get", "list") and not route.sub:
            return self._table(req, route, verb)
        if verb == "get":
            return self.get(route)
        if verb == "list":
            return self.list(req, route)
        if verb == "watch":
            return self.watch(req, route)
        if verb == "create":
            return self.create(req, route)
        if verb == "update":
            return self.update(req, route)
        if verb == "patch":
            return self.patch(req, route)
        if verb == "delete":
            return self.delete(req, route)
        return self.delete_collection(req, route)

    # ==================================================================================
    # discovery
    # ==================================================================================
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

    # ==================================================================================
    # reads
    # ==================================================================================
    def _key(self, route: Route) -> tuple[str, str]:
        rt = route.rt
        assert rt is not None and route.name is not None
        return (route.namespace or "") if rt.namespaced else "", route.name

    def _entry(self, route: Route) -> Entry:
        rt = route.rt
        assert rt is not None
        entry = self.store.entry(rt, *self._key(route))
        if entry is None:
            raise not_found(rt.plural, rt.group, route.name or "")
        return entry

    def _table(self, req: Request, route: Route, verb: str) -> Response:
        """``kubectl get``'s request: the object(s) as a meta.k8s.io/v1 Table."""
        rt = route.rt
        assert rt is not None
        include = req.query.get("includeObject") or "Metadata"
        if include not in ("None", "Metadata", "Object"):
            raise bad_request(
                f"includeObject must be one of None, Metadata or Object, got {include!r}"
            )
        if verb == "get":
            body = make_table(rt, [self._entry(route).obj], include=include)
            return Response(200, _json(body), TABLE_MEDIA)
        listed = json.loads(self.list(req, route).body)
        body = make_table(rt, listed["items"], include=include, metadata=listed["metadata"])
        return Response(200, _json(body), TABLE_MEDIA)

    def get(self, route: Route) -> Response:
        """GET one object (or its status subresource: the same object)."""
        return Response(200, self._entry(route).raw)

    def _selectors(self, req: Request, rt: ResourceType) -> tuple[LabelSelector, FieldSelector]:
        label = parse_label_selector(req.query.get("labelSelector"))
        fields = parse_field_selector(req.query.get("fieldSelector"), rt.fields)
        return label, fields

    def list(self, req: Request, route: Route) -> Response:
        """GET a collection: selectors, limit/continue, items joined from cached JSON."""
        rt = route.rt
        assert rt is not None
        label, fields = self._selectors(req, rt)
        limit_text = req.query.get("limit")
        try:
            limit = int(limit_text) if limit_text else None
        except ValueError as exc:
            raise bad_request(f"invalid limit {limit_text!r}") from exc
        result = self.store.list(
            rt,
            route.namespace,
            label,
            fields,
            limit if limit and limit > 0 else None,
            req.query.get("continue") or None,
        )
        meta: dict[str, Any] = {"resourceVersion": str(result.rv)}
        if result.continue_token:
            meta["continue"] = result.continue_token
            meta["remainingItemCount"] = result.remaining
        head = _json({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta})
        body = head[:-1] + b',"items":[' + b",".join(e.raw for e in result.entries) + b"]}"
        return Response(200, body)

    def service_proxy(self, req: Request, route: Route) -> Response:
        """``services/{name[:port]}/proxy/{path}``: the request relayed to one Ready pod the
        Service selects (in turn), whose simulated server answers (:mod:`kubesim.serving`)."""
        name, port = split_service(route.name or "")
        tail = req.path.split(f"/services/{route.name}/proxy", 1)[-1] or "/"
        with self.store.lock:
            service = self.store.get(self.types.services, route.namespace or "", name)
            if service is None:
                raise not_found("services", "", name)
            if service_port(service, port) is None:
                raise from_code(503, f'no service port "{port}" found for service "{name}"')
            selector = (service.get("spec") or {}).get("selector") or {}
            pods = sorted(
                (
                    p
                    for p in self.store.select(self.types.pods, route.namespace, selector)
                    if ready(p)
                )
                if selector
                else [],
                key=lambda p: p["metadata"]["name"],
            )
            if not pods:
                raise from_code(503, f'no endpoints available for service "{name}"')
            self._proxy_turn += 1
            answer = inference_answer(
                pods[self._proxy_turn % len(pods)], req.method, tail, req.body
            )
        return Response(answer.status, answer.body, answer.content_type, dict(answer.headers))

    def pod_log(self, req: Request, route: Route) -> Response:
        """``pods/{name}/log``: plain text; ``follow=true`` streams until the container ends.

        ``sinceSeconds`` (relative to the server's, that is the simulated, clock) or
        ``sinceTime`` (RFC 3339) keep the lines written at or after that instant, as the
        kubelet does; giving both is a 400, as on a real API server."""
        obj = self._entry(route).obj
        pod = self.sim.pod(*self._key(route))
        containers = [c["name"] for c in obj["spec"].get("containers") or []]
        container = req.query.get("container") or ""
        name = obj["metadata"]["name"]
        if not container:
            if len(containers) > 1:
                raise bad_request(
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(containers)}]"
                )
            container = containers[0]
        if container not in containers:
            raise bad_request(f"container {container} is not valid for pod {name}")
        if pod is None and (obj["metadata"].get("labels") or {}).get("app") in OPERATOR_APPS:
            text = "".join(f"{line}\n" for line in operator_log(obj))
            return Response(200, text.encode(), "text/plain; charset=utf-8")
        if pod is None or (pod.started_at is None and not pod.history):
            statuses = obj.get("status", {}).get("containerStatuses") or []
            reason = "ContainerCreating"
            for status in statuses:
                waiting = (status.get("state") or {}).get("waiting")
                if status.get("name") == container and waiting:
                    reason = waiting.get("reason", reason)
            if reason in ("ImagePullBackOff", "ErrImagePull"):
                raise bad_request(
                    f'container "{container}" in pod "{name}" is waiting to start: trying and '
                    "failing to pull image"
                )
            raise bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )
        previous = _true(req.query.get("previous"))
        timestamps = _true(req.query.get("timestamps"))
        tail = req.query.get("tailLines")
        limit_bytes = req.query.get("limitBytes")
        since = self._log_since(req)

        def render() -> list[str]:
            with self.store.lock:
                lines = self.sim.pod_log(
                    pod, obj, container, previous=previous, timestamps=timestamps, since=since
                )
            if previous and not lines:
                raise bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            if tail is not None and _is_int(tail):
                count = int(tail)
                lines = lines[-count:] if count > 0 else []
            return lines

        lines = render()
        text = "".join(line + "\n" for line in lines).encode()
        if limit_bytes and _is_int(limit_bytes) and int(limit_bytes) >= 0:
            text = text[: int(limit_bytes)]
        if not _true(req.query.get("follow")):
            return Response(200, text, "text/plain")
        sent = len(lines)

        def follow(writer: StreamWriter) -> None:
            nonlocal sent
            if text:
                writer.send(text)
            while not writer.gone():
                time.sleep(0.1)
                with self.store.lock:
                    current = self.sim.pod(*self._key(route))
                    done = (
                        current is None or current.state != "running" or current.started_at is None
                    )
                    lines = self.sim.pod_log(pod, obj, container, timestamps=timestamps)
                fresh = lines[sent:]
                if fresh:
                    writer.send("".join(line + "\n" for line in fresh).encode())
                    sent = len(lines)
                if done:
                    return

        return Response(200, b"", "text/plain", stream=follow)

    def _log_since(self, req: Request) -> float | None:
        """The instant ``sinceSeconds`` or ``sinceTime`` names, in simulated epoch seconds."""
        seconds = req.query.get("sinceSeconds")
        moment = req.query.get("sinceTime")
        if seconds is not None and moment is not None:
            raise bad_request("at most one of sinceTime or sinceSeconds may be specified")
        if seconds is not None:
            if not seconds.isdigit() or int(seconds) < 1:
                raise bad_request(
                    f'PodLogOptions.meta.k8s.io "" is invalid: sinceSeconds: Invalid value: '
                    f"{seconds}: must be greater than 0"
                )
            return self.sim.now() - int(seconds)
        if moment is not None:
            try:
                parsed = datetime.fromisoformat(moment.replace("Z", "+00:00"))
            except ValueError:
                raise bad_request(
                    f'parsing time "{moment}" as "2006-01-02T15:04:05Z07:00": cannot parse'
                ) from None
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            return parsed.timestamp()
        return None

    # ==================================================================================
    # watch
    # ==================================================================================
    def watch(self, req: Request, route: Route) -> Response:
        """A chunked stream of JSON lines: ADDED/MODIFIED/DELETED/BOOKMARK/ERROR."""
        rt = route.rt
        assert rt is not None
        label, fields = self._selectors(req, rt)
        rv_text = req.query.get("resourceVersion") or ""
        if rv_text in ("", "0"):
            since = None
        else:
            try:
                since = int(rv_text)
            except ValueError as exc:
                raise bad_request(f"invalid resource version {rv_text!r}") from exc
        timeout_text = req.query.get("timeoutSeconds")
        timeout = float(timeout_text) if timeout_text else 1800.0
        bookmarks = _true(req.query.get("allowWatchBookmarks"))
        forced_gone = self.faults.take(
            ("gone",), "watch", rt.plural, rt.group, None, route.namespace, None
        )
        interval = self.sim.settings.bookmark_interval_seconds
        render = None
        if wants_table(req.headers.get("accept")):
            include = req.query.get("includeObject") or "Metadata"
            columns_sent = [False]

            def render(entry: Entry) -> bytes:
                # kubectl -w: each event carries a one-row Table, the first one with columns
                body = make_table(rt, [], include=include)
                if columns_sent[0]:
                    body["columnDefinitions"] = []
                columns_sent[0] = True
                body["rows"] = [table_row(rt, entry.obj, include, time.time())]
                return _json(body)

        def error_line(err: ApiError) -> bytes:
            return b'{"type":"ERROR","object":' + _json(err.status()) + b"}\n"

        def stream(writer: StreamWriter) -> None:
            if forced_gone is not None:
                writer.send(
                    error_line(
                        gone(
                            f"too old resource version: {since or 0} ({self.store.rv}) "
                            "[kubesim injected fault]"
                        )
                    )
                )
                return
            try:
                watcher, initial, _start = self.store.watch(rt, route.namespace, since)
            except ApiError as err:
                writer.send(error_line(err))
                return
            try:
                self._pump(
                    writer, watcher, initial, label, fields, timeout, bookmarks, interval, render
                )
            finally:
                self.store.unwatch(watcher)

        return Response(200, b"", JSON, stream=stream)

    def _view(
        self, event: WatchEvent, label: LabelSelector, fields: FieldSelector, rt: ResourceType
    ) -> tuple[str, Entry] | None:
        if label.empty and fields.empty:
            return event.type, event.entry

        def ok(entry: Entry | None) -> bool:
            if entry is None:
                return False
            obj = entry.obj
            return label.matches(obj.get("metadata", {}).get("labels")) and (
                fields.empty or fields.matches(obj, rt.fields)
            )

        new_ok = ok(event.entry)
        if event.type == "ADDED":
            return ("ADDED", event.entry) if new_ok else None
        old_ok = ok(event.old)
        if event.type == "DELETED":
            return ("DELETED", event.entry) if (old_ok or new_ok) else None
        if new_ok and old_ok:
            return "MODIFIED", event.entry
        if new_ok:
            return "ADDED", event.entry
        if old_ok:
            return "DELETED", event.entry
        return None

    def _pump(
        self,
        writer: StreamWriter,
        watcher: Watcher,
        initial: list[WatchEvent],
        label: LabelSelector,
        fields: FieldSelector,
        timeout: float,
        bookmarks: bool,
        interval: float,
        render: Callable[[Entry], bytes] | None = None,
    ) -> None:
        rt = watcher.rt
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + interval
        bookmark_head = _json({"kind": rt.kind, "apiVersion": rt.api_version})[:-1]

        def encode(events: list[WatchEvent]) -> bytes:
            out = []
            for event in events:
                view = self._view(event, label, fields, rt)
                if view is None:
                    continue
                fault = self.faults.take(
                    ("drop", "duplicate"),
                    "watch",
                    rt.plural,
                    rt.group,
                    None,
                    event.entry.obj["metadata"].get("namespace"),
                    event.entry.obj["metadata"].get("name"),
                )
                if fault is not None and fault.kind == "drop":
                    continue
                raw = view[1].raw if render is None else render(view[1])
                line = b'{"type":"' + view[0].encode() + b'","object":' + raw + b"}\n"
                out.append(line)
                if fault is not None:
                    out.append(line)
            return b"".join(out)

        if initial:
            chunk = encode(initial)
            if chunk:
                writer.send(chunk)
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            wait = min(deadline - now, 0.25, max(next_bookmark - now, 0.0) if bookmarks else 0.25)
            try:
                event = watcher.queue.get(timeout=max(wait, 0.001))
            except queue_mod.Empty:
                event = _IDLE
            if event is None or watcher.closed:
                break
            if writer.gone():
                break
            if event is not _IDLE:
                batch = [event]
                while len(batch) < 1000:
                    try:
                        more = watcher.queue.get_nowait()
                    except queue_mod.Empty:
                        break
                    if more is None:
                        break
                    batch.append(more)
                chunk = encode(batch)
                if chunk:
                    writer.send(chunk)
            if bookmarks and time.monotonic() >= next_bookmark:
                next_bookmark = time.monotonic() + interval
                with self.store.lock:
                    caught_up = watcher.queue.empty()
                    rv = self.store.rv
                if caught_up:
                    writer.send(
                        b'{"type":"BOOKMARK","object":'
                        + bookmark_head
                        + b',"metadata":{"resourceVersion":"'
                        + str(rv).encode()
                        + b'"}}}\n'
                    )

    # ==================================================================================
    # decoding and common write steps
    # ==================================================================================
    def _decode(self, req: Request) -> Any:
        content_type = req.headers.get("content-type", JSON).split(";")[0].strip().lower()
        if not req.body:
            raise bad_request("the request body is empty")
        try:
            if "yaml" in content_type:
                return yaml.safe_load(req.body.decode())
            return json.loads(req.body)
        except (ValueError, yaml.YAMLError) as exc:
            raise bad_request(f"the body of the request could not be decoded: {exc}") from exc

    def _decode_object(self, req: Request, rt: ResourceType) -> dict[str, Any]:
        obj = self._decode(req)
        if not isinstance(obj, dict):
            raise bad_request(f"the body of the request must be a {rt.kind} object")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if rt.crd is not None and (not api_version or not kind):
            raise bad_request(
                f"Object 'Kind' is missing in '{json.dumps(obj)[:200]}'"
                if not kind
                else "Object 'apiVersion' is missing"
            )
        if api_version and api_version != rt.api_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})"
            )
        if kind and kind != rt.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        return obj

    @staticmethod
    def _field_validation(req: Request) -> str:
        mode = req.query.get("fieldValidation") or "Warn"
        if mode not in ("Strict", "Warn", "Ignore"):
            raise bad_request(
                f"fieldValidation must be one of Strict, Warn or Ignore, got {mode!r}"
            )
        return mode

    def _prune(self, rt: ResourceType, obj: dict[str, Any], mode: str, warnings: list[str]) -> None:
        """Unknown fields: Strict -> 400 BadRequest (as the apiserver), Warn -> header."""
        if rt.crd is None:
            return
        self._report_unknown(rt, rt.crd.prune(obj).unknown, mode, warnings)

    def _report_unknown(
        self, rt: ResourceType, unknown: list[str], mode: str, warnings: list[str]
    ) -> None:
        if not unknown:
            return
        texts = [f'unknown field "{path}"' for path in sorted(unknown)]
        if mode == "Strict":
            raise bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict '
                f"decoding error: {', '.join(texts)}"
            )
        if mode == "Warn":
            warnings.extend(texts)

    def _validate(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        causes = metadata_causes(obj["metadata"], rule=rt.name_rule)
        if rt.crd is not None:
            causes += rt.crd.validate(obj)
        if causes:
            raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), causes)

    def _check_namespace(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        if not rt.namespaced:
            return
        ns = self.store.get(self.types.namespaces, "", namespace or "")
        if ns is None:
            raise not_found("namespaces", "", namespace or "")
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f'{rt.key} "{name}" is forbidden: unable to create new content in namespace '
                f"{namespace} because it is being terminated",
                details={
                    "name": name,
                    "group": rt.group,
                    "kind": rt.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    def _queues(self) -> dict[str, dict[str, Any]]:
        return {q["metadata"]["name"]: q for q in self.store.select(self.types.queues)}

    def _warn_headers(self, warnings: list[str]) -> dict[str, str]:
        if not warnings:
            return {}
        return {"Warning": ", ".join(f"299 - {json.dumps(w)}" for w in warnings)}

    def _manager(self, req: Request) -> str:
        return req.query.get("fieldManager") or manager_from_user_agent(
            req.headers.get("user-agent")
        )

    # ==================================================================================
    # create
    # ==================================================================================
    def create(self, req: Request, route: Route) -> Response:
        """POST: decode, prune, default, validate, admit, store (201)."""
        rt = route.rt
        assert rt is not None
        mode = self._field_validation(req)
        obj = self._decode_object(req, rt)
        warnings: list[str] = []
        dry_run = req.query.get("dryRun") == "All"
        meta = obj["metadata"]
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != route.namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = route.namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{_random_suffix()}"
        for key in _SERVER_META:
            meta.pop(key, None)
        if rt.crd is not None:
            created = self._admit_custom(rt, obj, mode, warnings)
        else:
            self._prune(rt, obj, mode, warnings)
            created = self._admit_create(rt, obj, req)
        with self.store.lock:
            self._check_namespace(rt, route.namespace, str(meta.get("name")))
            if rt is self.types.jobs:
                admission.validate_job_create(created, self._queues())
            if rt is self.types.queues:
                admission.validate_queue(created, self._queues())
            created["metadata"]["managedFields"] = record_update(
                None, created, self._manager(req), wall_text()
            )
            if dry_run:
                key = (route.namespace or "", created["metadata"]["name"])
                if self.store.get(rt, *key) is not None:
                    from kubesim.errors import already_exists

                    raise already_exists(rt.plural, rt.group, key[1])
                created["metadata"].setdefault("uid", _dry_uid())
                created["metadata"].setdefault("creationTimestamp", wall_text())
                created["metadata"].setdefault("generation", 1)
                return self._ok(created, 201, self._warn_headers(warnings))
            stored = self.store.create(rt, created)
            body = self._raw(rt, stored)
        return Response(201, body, JSON, self._warn_headers(warnings))

    def _raw(self, rt: ResourceType, obj: dict[str, Any]) -> bytes:
        """The stored entry's JSON (serialised once, shared with lists and watches)."""
        meta = obj["metadata"]
        entry = self.store.entry(
            rt, meta.get("namespace", "") if rt.namespaced else "", meta["name"]
        )
        return entry.raw if entry is not None and entry.obj is obj else Entry(obj).raw

    def _admit_custom(
        self, rt: ResourceType, obj: dict[str, Any], mode: str, warnings: list[str]
    ) -> dict[str, Any]:
        """Prune, default, validate and mutate a custom object, memoised per distinct body.

        Everything here depends only on the body (the schema does not look into metadata),
        so a portal submitting many jobs from one template pays for it once.
        """
        crd = rt.crd
        assert crd is not None
        meta_unknown = [k for k in obj["metadata"] if k not in OBJECT_META_FIELDS]
        for key in meta_unknown:
            del obj["metadata"][key]
        body = {k: v for k, v in obj.items() if k != "metadata"}
        cache_key = (rt.key, json.dumps(body, sort_keys=True, separators=(",", ":"), default=str))
        with self._admitted_lock:
            cached = self._admitted.get(cache_key)
        if cached is None:
            work = clone(body)
            work["metadata"] = {"name": "x"}
            unknown = crd.prune(work).unknown
            if "status" in rt.subresources:
                work.pop("status", None)
            crd.apply_defaults(work)
            causes = crd.validate(work)
            if not causes:
                if rt is self.types.jobs:
                    admission.mutate_job(work)
                elif rt is self.types.queues:
                    admission.mutate_queue(work)
            work.pop("metadata")
            cached = (work, unknown, causes)
            with self._admitted_lock:
                if len(self._admitted) > 512:
                    self._admitted.pop(next(iter(self._admitted)))
                self._admitted[cache_key] = cached
        final, unknown, causes = cached
        self._report_unknown(rt, [f"metadata.{k}" for k in meta_unknown] + unknown, mode, warnings)
        causes = metadata_causes(obj["metadata"], rule=rt.name_rule) + list(causes)
        if causes:
            raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), causes)
        return {**clone(final), "metadata": obj["metadata"]}

    def _admit_create(self, rt: ResourceType, obj: dict[str, Any], req: Request) -> dict[str, Any]:
        """Type-specific defaults and validation up to (not including) the store."""
        if rt.crd is not None:
            if "status" in rt.subresources:
                obj.pop("status", None)
            rt.crd.apply_defaults(obj)
            self._validate(rt, obj)
            if rt is self.types.jobs:
                admission.mutate_job(obj)
            elif rt is self.types.queues:
                admission.mutate_queue(obj)
            return obj
        if rt is self.types.namespaces:
            self._validate(rt, obj)
            fresh = self.sim.new_namespace(obj["metadata"]["name"], obj["metadata"].get("labels"))
            fresh["metadata"]["annotations"] = obj["metadata"].get("annotations") or {}
            if not fresh["metadata"]["annotations"]:
                del fresh["metadata"]["annotations"]
            return fresh
        if rt is self.types.events:
            self._validate(rt, obj)
            obj.setdefault("count", 1)
            return obj
        if rt is self.types.secrets:
            self._validate(rt, obj)
            causes = secret_causes(obj)
            if causes:
                raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), causes)
            return secret_admitted(obj)
        if rt is self.types.configmaps:
            _configmap_decodes(obj)
            self._validate(rt, obj)
            causes = configmap_causes(obj)
            if causes:
                raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), causes)
            return obj
        if rt is self.types.services:
            self._validate(rt, obj)
            causes = service_name_causes(obj["metadata"]) + service_causes(obj)
            if causes:
                raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), causes)
            return service_admitted(obj, self.sim.next_cluster_ip())
        if rt is self.types.ingresses:
            self._validate(rt, obj)
            causes = ingress_causes(obj)
            if causes:
                raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), causes)
            obj["status"] = {"loadBalancer": {}}
            return obj
        raise method_not_allowed()

    # ==================================================================================
    # update and patch
    # ==================================================================================
    def _merge_update(
        self, rt: ResourceType, current: dict[str, Any], new: dict[str, Any], sub: str | None
    ) -> dict[str, Any]:
        """The object an update would store: status/spec split, immutable metadata kept."""
        cur_meta = current["metadata"]
        new_meta = new.get("metadata") or {}
        if sub == "status":
            result = {**current, "metadata": dict(cur_meta)}
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            return result
        result = {k: v for k, v in new.items() if k != "status"}
        if "status" in current and ("status" in rt.subresources or rt.crd is None):
            result["status"] = current["status"]
        elif "status" in new and rt.crd is not None:
            result["status"] = new["status"]
        meta = {k: v for k, v in new_meta.items() if k not in _IMMUTABLE_META}
        for key in _IMMUTABLE_META:
            if key in cur_meta:
                meta[key] = cur_meta[key]
        meta["managedFields"] = cur_meta.get("managedFields", [])
        if new.get("spec") != current.get("spec"):
            meta["generation"] = int(cur_meta.get("generation", 1)) + 1
        result["metadata"] = meta
        result["apiVersion"], result["kind"] = current["apiVersion"], current["kind"]
        return result

    def _write(
        self,
        req: Request,
        route: Route,
        build: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        warnings: list[str],
        manager: str,
        operation: str = "Update",
        managed: Callable[[dict[str, Any], dict[str, Any]], list[dict[str, Any]]] | None = None,
    ) -> Response:
        """Shared tail of PUT and PATCH: build, validate, admit, compare-and-swap, store."""
        rt = route.rt
        assert rt is not None
        dry_run = req.query.get("dryRun") == "All"
        with self.store.lock:
            current = self._entry(route).obj
            candidate = build(clone(current))
            if candidate.get("metadata", {}).get("name", route.name) != route.name:
                raise bad_request(
                    f"the name of the object ({candidate['metadata'].get('name')}) does not match "
                    f"the name on the URL ({route.name})"
                )
            want_rv = (candidate.get("metadata") or {}).get("resourceVersion")
            if want_rv and want_rv != current["metadata"]["resourceVersion"]:
                raise conflict(rt.plural, rt.group, route.name or "")
            self._prune(rt, candidate, self._field_validation(req), warnings)
            result = self._merge_update(rt, current, candidate, route.sub)
            if rt.crd is not None:
                rt.crd.apply_defaults(result)
            self._validate(rt, result)
            self._admit_update(rt, current, result, route.sub)
            if managed is not None:
                result["metadata"]["managedFields"] = managed(current, result)
            elif route.sub is None:
                result["metadata"]["managedFields"] = record_update(
                    current, result, manager, wall_text(), operation=operation
                )
            if _same(current, result):
                return Response(200, self._entry(route).raw, JSON, self._warn_headers(warnings))
            if dry_run:
                return self._ok(result, 200, self._warn_headers(warnings))
            result["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            stored = self.store.replace(rt, result)
            meta = stored["metadata"]
            if (
                meta.get("deletionTimestamp")
                and not meta.get("finalizers")
                and (rt is not self.types.namespaces)
            ):
                stored = self.store.delete(rt, meta.get("namespace", ""), meta["name"]) or stored
            body = Entry(stored).raw
        return Response(200, body, JSON, self._warn_headers(warnings))

    def _admit_update(
        self, rt: ResourceType, current: dict[str, Any], result: dict[str, Any], sub: str | None
    ) -> None:
        if sub == "status":
            return
        if rt is self.types.jobs:
            admission.validate_job_update(current, result)
        elif rt is self.types.queues:
            admission.validate_queue(result, self._queues())
        elif rt is self.types.pods and result.get("spec") != current.get("spec"):
            raise invalid(
                "Pod",
                "",
                current["metadata"]["name"],
                [
                    {
                        "reason": "FieldValueForbidden",
                        "field": "spec",
                        "message": "spec: Forbidden: pod updates may not change fields other than "
                        "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                        "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
                        "existing tolerations) or `spec.terminationGracePeriodSeconds` "
                        "(kubesim allows metadata changes only)",
                    }
                ],
            )
        elif rt is self.types.namespaces and result.get("spec") != current.get("spec"):
            result["spec"] = current.get("spec")
        elif rt is self.types.configmaps:
            _configmap_decodes(result)
            causes = configmap_causes(result) + configmap_update_causes(current, result)
            if causes:
                raise invalid("ConfigMap", "", current["metadata"]["name"], causes)

    def update(self, req: Request, route: Route) -> Response:
        """PUT: replace the object (or its status)."""
        rt = route.rt
        assert rt is not None
        new = self._decode_object(req, rt)
        warnings: list[str] = []
        return self._write(
            req, route, lambda _current: new, warnings=warnings, manager=self._manager(req)
        )

    def patch(self, req: Request, route: Route) -> Response:
        """PATCH: JSON patch, merge patch, strategic merge (built-ins only) or apply."""
        rt = route.rt
        assert rt is not None
        content_type = req.headers.get("content-type", "").split(";")[0].strip().lower()
        accepted = list(PATCH_TYPES)
        if rt.crd is None:
            accepted.append("application/strategic-merge-patch+json")
        if content_type not in accepted:
            raise unsupported_media_type(content_type, accepted)
        warnings: list[str] = []
        manager = self._manager(req)
        if content_type == "application/apply-patch+yaml":
            return self._apply(req, route, warnings)
        body = self._decode(req)
        if content_type == "application/json-patch+json":
            return self._write(
                req, route, lambda cur: json_patch(cur, body), warnings=warnings, manager=manager
            )
        if not isinstance(body, dict):
            raise bad_request("a merge patch must be a JSON object")
        return self._write(
            req, route, lambda cur: merge_patch(cur, body), warnings=warnings, manager=manager
        )

    def _apply(self, req: Request, route: Route, warnings: list[str]) -> Response:
        """Server-side apply: create when absent, else merge with field ownership."""
        rt = route.rt
        assert rt is not None
        manager = req.query.get("fieldManager")
        if not manager:
            raise bad_request("PATCH " + req.path + ": fieldManager is required for apply requests")
        force = _true(req.query.get("force"))
        applied = self._decode_object(req, rt)
        applied["metadata"].setdefault("name", route.name)
        if rt.namespaced:
            applied["metadata"]["namespace"] = route.namespace
        qualified = f"{rt.key}/{route.name}"
        with self.store.lock:
            exists = self.store.entry(rt, *self._key(route)) is not None
            if not exists and route.sub is None:
                if "create" not in rt.verbs:
                    raise not_found(rt.plural, rt.group, route.name or "")
                self._prune(rt, applied, self._field_validation(req), warnings)
                obj, managed = server_side_apply(
                    None, applied, manager, force, wall_text(), qualified
                )
                for key in _SERVER_META:
                    obj["metadata"].pop(key, None)
                created = self._admit_create(rt, obj, req)
                self._check_namespace(rt, route.namespace, route.name or "")
                if rt is self.types.jobs:
                    admission.validate_job_create(created, self._queues())
                if rt is self.types.queues:
                    admission.validate_queue(created, self._queues())
                created["metadata"]["managedFields"] = managed
                if req.query.get("dryRun") == "All":
                    return self._ok(created, 201, self._warn_headers(warnings))
                stored = self.store.create(rt, created)
                return Response(201, Entry(stored).raw, JSON, self._warn_headers(warnings))
            self._prune(rt, applied, self._field_validation(req), warnings)
            holder: dict[str, Any] = {}

            def build(current: dict[str, Any]) -> dict[str, Any]:
                merged, managed = server_side_apply(
                    current, applied, manager, force, wall_text(), qualified
                )
                holder["managed"] = managed
                return merged

            return self._write(
                req,
                route,
                build,
                warnings=warnings,
                manager=manager,
                operation="Apply",
                managed=lambda _cur, _res: holder["managed"],
            )

    # ==================================================================================
    # delete
    # ==================================================================================
    def _delete_options(self, req: Request) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if req.body:
            try:
                body = json.loads(req.body)
            except ValueError as exc:
                raise bad_request(f"invalid DeleteOptions: {exc}") from exc
            if isinstance(body, dict):
                options.update({k: v for k, v in body.items() if v is not None})
        for key in ("propagationPolicy", "gracePeriodSeconds", "dryRun", "orphanDependents"):
            if key in req.query:
                options[key] = req.query[key]
        if _true(str(options.get("orphanDependents", ""))):
            options.setdefault("propagationPolicy", "Orphan")
        policy = options.get("propagationPolicy")
        if policy is not None and policy not in ("Background", "Foreground", "Orphan"):
            raise bad_request(
                f"propagationPolicy {policy!r} is not one of Background, Foreground, Orphan"
            )
        dry = options.get("dryRun")
        options["dryRun"] = dry == "All" or (isinstance(dry, list) and "All" in dry)
        return options

    def delete(self, req: Request, route: Route) -> Response:
        """DELETE one object, with propagationPolicy and gracePeriodSeconds."""
        rt = route.rt
        assert rt is not None
        options = self._delete_options(req)
        with self.store.lock:
            entry = self._entry(route)
            if options["dryRun"]:
                return Response(200, entry.raw)
            final = self._delete_one(rt, entry.obj, options)
        return self._ok(final if final is not None else entry.obj)

    def _delete_one(
        self, rt: ResourceType, obj: dict[str, Any], options: dict[str, Any]
    ) -> dict[str, Any] | None:
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        if rt is self.types.jobs:
            return self.sim.delete_job(
                namespace, name, options.get("propagationPolicy") or "Background"
            )
        if rt is self.types.pods:
            grace = options.get("gracePeriodSeconds")
            pod = self.sim.pod(namespace, name)
            if pod is None:
                return self.store.delete(rt, namespace, name)
            return self.sim.delete_pod(pod, grace=float(grace) if grace is not None else None)
        if rt is self.types.namespaces:
            if name in BUILTIN_NAMESPACES:
                raise ApiError(
                    403,
                    "Forbidden",
                    f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                    details={"name": name, "kind": "namespaces"},
                )
            return self.sim.delete_namespace(name)
        if rt is self.types.queues:
            admission.validate_queue_delete(name, self._queues())
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return obj
            return self.store.replace(
                rt, {**obj, "metadata": {**meta, "deletionTimestamp": wall_text()}}
            )
        return self.store.delete(rt, namespace, name)

    def delete_collection(self, req: Request, route: Route) -> Response:
        """DELETE a collection: every object matching the selectors; returns them as a list."""
        rt = route.rt
        assert rt is not None
        label, fields = self._selectors(req, rt)
        options = self._delete_options(req)
        with self.store.lock:
            result = self.store.list(rt, route.namespace, label, fields)
            deleted = []
            for entry in result.entries:
                if options["dryRun"]:
                    deleted.append(entry.obj)
                    continue
                final = self._delete_one(rt, entry.obj, options)
                deleted.append(final if final is not None else entry.obj)
        return self._ok(
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self.store.rv)},
                "items": deleted,
            }
        )


_IDLE: Any = object()
OPERATOR_APPS = (DEVICE_PLUGIN, DCGM_EXPORTER)


def _configmap_decodes(obj: dict[str, Any]) -> None:
    """A non-string value fails to decode into a ConfigMap (400, as Go's JSON decoder says)."""
    for part in ("data", "binaryData"):
        values = obj.get(part)
        if not isinstance(values, dict):
            continue
        for value in values.values():
            if not isinstance(value, str):
                got = "number" if isinstance(value, int | float) else type(value).__name__
                if isinstance(value, bool):
                    got = "bool"
                raise bad_request(
                    'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot '
                    f"unmarshal {got} into Go struct field ConfigMap.{part} of type string"
                )


def _same(current: dict[str, Any], result: dict[str, Any]) -> bool:
    """Whether an update changes nothing but managedFields timestamps (then it is a no-op)."""

    def strip(obj: dict[str, Any]) -> dict[str, Any]:
        meta = {
            k: v
            for k, v in obj["metadata"].items()
            if k not in ("managedFields", "resourceVersion")
        }
        return {**obj, "metadata": meta}

    return strip(current) == strip(result)


def _dry_uid() -> str:
    return str(uuid.uuid4())
