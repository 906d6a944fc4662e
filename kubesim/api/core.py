"""The request pipeline: authenticate, route, authorize, inject faults, then hand the
request to its verb. :class:`Api` holds the state every verb reads (the simulation, its store
and types, the fault injector); the verbs live in the mixins beside this module.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubesim import metrics as metrics_api
from kubesim.api.create import CreateMixin
from kubesim.api.delete import DeleteMixin
from kubesim.api.discovery import DiscoveryMixin
from kubesim.api.reads import ReadsMixin
from kubesim.api.subresources import SubresourcesMixin
from kubesim.api.update import UpdateMixin
from kubesim.api.watch import WatchMixin
from kubesim.api.wire import JSON, Request, Response, Route, _json, _true
from kubesim.api.writes import WriteStepsMixin
from kubesim.auth import Authenticator, Principal
from kubesim.errors import (
    ApiError,
    bad_request,
    forbidden,
    from_code,
    method_not_allowed,
    not_found,
    unauthorized,
)
from kubesim.faults import FaultInjector
from kubesim.openapi import OpenAPI
from kubesim.selectors import SelectorError
from kubesim.sim import Simulation
from kubesim.tables import wants_table

log = logging.getLogger("kubesim")


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


class Api(
    DiscoveryMixin,
    ReadsMixin,
    SubresourcesMixin,
    WatchMixin,
    WriteStepsMixin,
    CreateMixin,
    UpdateMixin,
    DeleteMixin,
):
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
