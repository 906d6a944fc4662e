"""The public Python API: :class:`KubeSim`, a simulated cluster you can start in-process.

Typical test use::

    from kubesim import KubeSim, load_config

    with KubeSim(load_config("small"), clock_speed=0) as sim:
        api = kubernetes.config.new_client_from_config_dict(sim.kubeconfig_dict())
        ...  # create a Volcano Job through CustomObjectsApi(api)
        sim.settle()            # let the controller and scheduler react (no time passes)
        sim.advance(120)        # two simulated minutes: pods start, run and finish
        sim.faults.add(verb="create", resource="jobs", status=500, count=2)

Everything a test needs to *observe* is available without HTTP as well (``sim.get``,
``sim.list``, ``sim.job_phase``), so assertions do not depend on the client under test.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kubesim.api import Api, Request, Response
from kubesim.auth import Authenticator
from kubesim.clock import SimClock
from kubesim.config import ClusterConfig, load_config
from kubesim.errors import ApiError, bad_request
from kubesim.faults import FaultInjector
from kubesim.objects import clone
from kubesim.resources import Types
from kubesim.runtime import BUILTIN_NAMESPACES, INSTALLED_NAMESPACES
from kubesim.server import HttpServer
from kubesim.sim import Simulation
from kubesim.store import ResourceType, Store
from kubesim.tls import Certificates, generate

_ALIASES = {
    "node": "nodes",
    "no": "nodes",
    "namespace": "namespaces",
    "ns": "namespaces",
    "pod": "pods",
    "po": "pods",
    "event": "events",
    "ev": "events",
    "job": "jobs",
    "vcjob": "jobs",
    "vj": "jobs",
    "queue": "queues",
    "q": "queues",
    "podgroup": "podgroups",
    "pg": "podgroups",
    "command": "commands",
    "configmap": "configmaps",
    "cm": "configmaps",
}


class KubeSim:
    """A Kubernetes API server with simulated GPU nodes and Volcano, in this process.

    :param config: a :class:`ClusterConfig`, a path, a packaged name (``"small"``,
        ``"large"``) or a dict in the config-file format.
    :param tls: serve HTTPS with a freshly generated CA (default); ``False`` for plain HTTP.
    :param clock_speed: simulated seconds per wall second; ``0`` freezes time so that only
        :meth:`advance` moves it (deterministic tests).
    :param token: the cluster-admin bearer token (random when omitted).
    :param roles: extra tokens: ``{token: "view" | "edit" | rules | {"user", "role"|"rules"}}``.
    """

    def __init__(
        self,
        config: ClusterConfig | str | Path | dict[str, Any] = "small",
        *,
        tls: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        clock_speed: float = 1.0,
        token: str | None = None,
        roles: dict[str, Any] | None = None,
        extra_hosts: list[str] | None = None,
    ) -> None:
        self.config = config if isinstance(config, ClusterConfig) else load_config(config)
        self.host = host
        self._port = port
        self.tls = tls
        self.clock = SimClock(clock_speed)
        self.types = Types()
        self.store = Store(history_size=self.config.simulation.history_size, now=self._now_text)
        self.sim = Simulation(self.config, self.store, self.clock, self.types)
        self.faults = FaultInjector(on_compact=self.store.compact)
        self.auth = Authenticator()
        self.token = token or secrets.token_urlsafe(24)
        self.auth.add(self.token, "cluster-admin", user="kubesim-admin")
        for extra, spec in (roles or {}).items():
            self.auth.add(extra, spec)
        self.api = Api(self.sim, self.auth, self.faults, control=self._control)
        self._certs: Certificates | None = generate(extra_hosts) if tls else None
        self._http: HttpServer | None = None
        self.sim.bootstrap()

    def _now_text(self) -> str:
        """creationTimestamp of new objects: wall clock (see :func:`kubesim.clock.wall_text`)."""
        from kubesim.clock import wall_text

        return wall_text()

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> KubeSim:
        """Bind the port and start serving and simulating."""
        if self._http is not None:
            return self
        context = self._certs.server_context() if self._certs else None
        self._http = HttpServer(self.api, self.host, self._port, context)
        self._http.start()
        self.sim.start()
        return self

    def stop(self) -> None:
        """Stop serving: open watches end, connections are closed, the loop stops."""
        self.store.close_watchers()
        if self._http is not None:
            self._http.stop()
            self._http = None
        self.sim.stop()

    def __enter__(self) -> KubeSim:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- connection details --------------------------------------------------------------
    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._http is None:
            raise RuntimeError("KubeSim is not started")
        return self._http.port

    @property
    def url(self) -> str:
        """``https://127.0.0.1:<port>`` (or ``http://``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    @property
    def ca_pem(self) -> bytes | None:
        """The CA certificate that signed the server certificate (None over HTTP)."""
        return self._certs.ca_pem if self._certs else None

    def kubeconfig_dict(
        self,
        token: str | None = None,
        namespace: str = "default",
        client_certificate: tuple[bytes, bytes] | None = None,
    ) -> dict:
        """A kubeconfig (as a dict) with the CA and a bearer token (admin by default), or the
        (certificate, key) of :meth:`client_certificate` instead of a token."""
        cluster: dict[str, Any] = {"server": self.url}
        if self._certs is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self._certs.ca_pem).decode()
        user: dict[str, str] = {"token": token or self.token}
        if client_certificate is not None:
            cert_pem, key_pem = client_certificate
            user = {
                "client-certificate-data": base64.b64encode(cert_pem).decode(),
                "client-key-data": base64.b64encode(key_pem).decode(),
            }
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.config.name, "cluster": cluster}],
            "users": [{"name": f"{self.config.name}-user", "user": user}],
            "contexts": [
                {
                    "name": self.config.name,
                    "context": {
                        "cluster": self.config.name,
                        "user": f"{self.config.name}-user",
                        "namespace": namespace,
                    },
                }
            ],
            "current-context": self.config.name,
            "preferences": {},
        }

    def write_kubeconfig(self, path: str | Path, token: str | None = None) -> Path:
        """Write :meth:`kubeconfig_dict` as YAML (mode 0600, it holds a token)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(self.kubeconfig_dict(token), sort_keys=False)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return target

    def client_certificate(self, user: str, role: Any = "cluster-admin") -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) with CN ``user``, signed by this server's CA, and the
        role or rules granted to that user (``None`` grants nothing: every request a 403)."""
        if self._certs is None:
            raise RuntimeError("client certificates need TLS")
        if role is not None:
            self.auth.add_user(user, role)
        return self._certs.client_certificate(user)

    def add_token(
        self, token: str | None = None, role: Any = "view", user: str | None = None
    ) -> str:
        """Register another bearer token with a role or rule list; returns the token."""
        token = token or secrets.token_urlsafe(16)
        self.auth.add(token, role, user=user)
        return token

    # -- time ----------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        """Move simulated time forward, processing everything that happens on the way."""
        self.sim.advance(seconds)

    def settle(self) -> None:
        """Process all pending zero-time work (controller, scheduler) without moving time."""
        self.sim.settle()

    def set_clock_speed(self, speed: float) -> None:
        """Change the speed factor (0 = manual only)."""
        self.clock.set_speed(speed)
        self.sim.wake.set()

    def pause(self) -> None:
        """Freeze the background simulation (the API keeps answering; settle/advance work)."""
        self.sim.pause()

    def resume(self) -> None:
        """Undo :meth:`pause`."""
        self.sim.resume()

    def now(self) -> float:
        """Simulated time (epoch seconds)."""
        return self.clock.now()

    def wait_for(
        self, predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01
    ) -> Any:
        """Poll ``predicate`` (settling first) until truthy or ``timeout`` wall seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self.settle()
            value = predicate()
            if value or time.monotonic() >= deadline:
                return value
            time.sleep(interval)

    # -- node and queue events -----------------------------------------------------------
    def node_not_ready(self, name: str, mode: str = "evict") -> None:
        """The node goes NotReady; its pods are evicted (or failed) after evictionSeconds."""
        self.sim.node_not_ready(name, mode=mode)

    def node_ready(self, name: str) -> None:
        """The node comes back Ready."""
        self.sim.node_ready(name)

    def cordon(self, name: str) -> None:
        """Mark the node unschedulable."""
        self.sim.cordon(name, True)

    def out_of_service(self, name: str, on: bool = True) -> None:
        """Taint the node ``node.kubernetes.io/out-of-service`` (or remove the taint)."""
        self.sim.out_of_service(name, on)

    def device_plugin_fails(self, name: str) -> None:
        """The node's NVIDIA device plugin crashes: 0 GPUs advertised, its pod CrashLoopBackOff."""
        self.sim.device_plugin_fails(name)

    def delete_node(self, name: str) -> None:
        """Delete the Node object; the pod GC force-deletes its pods."""
        self.sim.delete_node(name)

    def drain(self, name: str) -> None:
        """Cordon the node and evict its pods, as ``kubectl drain`` does."""
        self.sim.drain(name)

    def uncordon(self, name: str) -> None:
        """Make the node schedulable again."""
        self.sim.cordon(name, False)

    def add_queue(
        self,
        name: str,
        *,
        weight: int = 1,
        capability: dict[str, Any] | None = None,
        state: str = "Open",
        parent: str | None = None,
    ) -> dict[str, Any]:
        """Create a Volcano Queue directly (as a cluster admin would)."""
        item: dict[str, Any] = {"name": name, "weight": weight, "state": state}
        if capability:
            item["capability"] = capability
        if parent:
            item["parent"] = parent
        with self.store.lock:
            created = self.store.create(self.types.queues, self.sim.new_queue(item))
            self.sim.settle()
        return clone(created)

    def delete_queue(self, name: str) -> None:
        """Delete a queue directly (webhook rules do not apply here)."""
        with self.store.lock:
            self.store.delete(self.types.queues, "", name)
            self.sim.settle()

    def close_queue(self, name: str) -> None:
        """Close a queue as a ``CloseQueue`` Command would (Closing while PodGroups remain)."""
        self.sim.set_queue_state(name, "Closed")

    def open_queue(self, name: str) -> None:
        """Open a queue again, as an ``OpenQueue`` Command would."""
        self.sim.set_queue_state(name, "Open")

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        """Create a namespace directly."""
        with self.store.lock:
            if self.store.get(self.types.namespaces, "", name) is None:
                self.store.create(self.types.namespaces, self.sim.new_namespace(name, labels))

    def lose_state(self) -> list[str]:
        """Lose what an API server that restarted with an empty store would have lost, as far
        as a client can tell: every namespace but the built-in ones is deleted (its Volcano
        Jobs, PodGroups and pods with it, as a namespace deletion does) and every queue but
        ``default`` and ``root`` is gone. Nodes stay: their kubelets register again.

        Returns the namespaces deleted. They are gone once their pods have terminated
        (``advance`` by the pods' termination time); the queues are gone at once.
        """
        with self.store.lock:
            namespaces = sorted(
                obj["metadata"]["name"]
                for obj in self.store.select(self.types.namespaces, "")
                if obj["metadata"]["name"] not in (*BUILTIN_NAMESPACES, *INSTALLED_NAMESPACES)
            )
            for name in namespaces:
                self.sim.delete_namespace(name)
            for obj in self.store.select(self.types.queues, ""):
                if obj["metadata"]["name"] not in ("default", "root"):
                    self.store.delete(self.types.queues, "", obj["metadata"]["name"])
            self.sim.settle()
        return namespaces

    def compact(self) -> None:
        """Expire watch history (older resourceVersions and continue tokens answer 410)."""
        self.faults.compact()

    # -- observing -----------------------------------------------------------------------
    def resource(self, kind: str) -> ResourceType:
        """Resolve ``"pods"``, ``"Pod"``, ``"vcjob"``... to a resource type."""
        key = kind.lower()
        key = _ALIASES.get(key, key)
        for rt in self.types.all:
            if rt.plural == key:
                return rt
        raise KeyError(f"unknown kind {kind!r}")

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """A copy of one object, or None."""
        rt = self.resource(kind)
        with self.store.lock:
            obj = self.store.get(rt, (namespace or "default") if rt.namespaced else "", name)
            return clone(obj) if obj is not None else None

    def list(
        self, kind: str, namespace: str | None = None, labels: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Copies of objects, optionally in one namespace and matching label equalities."""
        rt = self.resource(kind)
        with self.store.lock:
            items = self.store.select(rt, namespace, labels)
            out = [clone(o) for o in items]
        out.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return out

    def job_phase(self, namespace: str, name: str) -> str | None:
        """``status.state.phase`` of a Volcano Job."""
        job = self.get("jobs", name, namespace)
        return ((job or {}).get("status") or {}).get("state", {}).get("phase")

    def job_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The pods of a Volcano Job (label ``volcano.sh/job-name``)."""
        return self.list("pods", namespace, {"volcano.sh/job-name": name})

    def podgroup(self, namespace: str, job_name: str) -> dict[str, Any] | None:
        """The PodGroup of a Volcano Job."""
        groups = [
            pg
            for pg in self.list("podgroups", namespace)
            if any(o.get("name") == job_name for o in pg["metadata"].get("ownerReferences") or [])
        ]
        return groups[0] if groups else None

    def events(
        self, namespace: str | None = None, involved: str | None = None
    ) -> list[dict[str, Any]]:
        """Events, optionally only those about the object named ``involved``."""
        items = self.list("events", namespace)
        if involved is not None:
            items = [e for e in items if e["involvedObject"].get("name") == involved]
        return items

    def create(
        self, manifest: dict[str, Any], namespace: str | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """Create an object through the full API pipeline (validation, admission) in-process."""
        rt = self.resource(manifest.get("kind", ""))
        ns = namespace or manifest.get("metadata", {}).get("namespace") or "default"
        base = f"/apis/{rt.group}/{rt.version}" if rt.group else "/api/v1"
        path = f"{base}/namespaces/{ns}/{rt.plural}" if rt.namespaced else f"{base}/{rt.plural}"
        if dry_run:
            path += "?dryRun=All"
        response = self.api.handle(
            Request.build(
                "POST",
                path,
                {"authorization": f"Bearer {self.token}", "content-type": "application/json"},
                json.dumps(manifest).encode(),
            )
        )
        body = json.loads(response.body)
        if response.status >= 400:
            raise ApiError(
                response.status,
                body.get("reason", ""),
                body.get("message", ""),
                details=body.get("details"),
            )
        return body

    def stats(self) -> dict[str, Any]:
        """Counters: pods created/bound/finished, scheduling time, requests, watchers."""
        with self.store.lock:
            watchers = sum(len(c.watchers) for c in self.store.collections.values())
            counts = {rt.plural: len(self.store.collection(rt).objects) for rt in self.types.all}
        stats = dict(self.sim.stats.__dict__)
        cycles = stats["scheduling_seconds"]
        stats.update(
            cpu_seconds=time.process_time(),
            api_seconds=self.api.cpu_seconds,
            requests=self.api.requests,
            watchers=watchers,
            objects=counts,
            resource_version=self.store.rv,
            pods_bound_per_second=(stats["pods_bound"] / cycles) if cycles else None,
            simulated_time=self.clock.now(),
            gpus=self.sim.gpu_inventory(),
        )
        return stats

    # -- the control endpoint (/kubesim/v1/...) ------------------------------------------
    def _control(self, req: Request, parts: list[str]) -> Response:
        def ok(obj: Any) -> Response:
            return Response(200, json.dumps(obj).encode())

        body: dict[str, Any] = {}
        if req.body:
            try:
                body = json.loads(req.body)
            except ValueError as exc:
                raise bad_request(f"invalid JSON: {exc}") from exc
        method = req.method
        if parts == ["stats"] and method == "GET":
            return ok(self.stats())
        if parts == ["advance"] and method == "POST":
            self.advance(float(body.get("seconds", 0)))
            return ok({"simulatedTime": self.clock.now()})
        if parts == ["clock"] and method == "POST":
            self.set_clock_speed(float(body["speed"]))
            return ok({"speed": self.clock.speed})
        if parts in (["pause"], ["resume"]) and method == "POST":
            (self.pause if parts == ["pause"] else self.resume)()
            return ok({"paused": self.sim.paused})
        if parts == ["compact"] and method == "POST":
            self.compact()
            return ok({"resourceVersion": self.store.rv})
        if len(parts) == 3 and parts[0] == "nodes" and method == "POST":
            name, action = parts[1], parts[2]
            actions = {
                "not-ready": lambda: self.node_not_ready(name, body.get("mode", "evict")),
                "ready": lambda: self.node_ready(name),
                "cordon": lambda: self.cordon(name),
                "drain": lambda: self.drain(name),
                "out-of-service": lambda: self.out_of_service(name, True),
                "in-service": lambda: self.out_of_service(name, False),
                "uncordon": lambda: self.uncordon(name),
                "device-plugin-fails": lambda: self.device_plugin_fails(name),
            }
            if action not in actions:
                raise bad_request(f"unknown node action {action!r}")
            try:
                actions[action]()
            except KeyError as exc:
                raise ApiError(404, "NotFound", str(exc)) from exc
            return ok({"node": name, "action": action})
        if len(parts) == 3 and parts[0] == "queues" and method == "POST":
            state = {"open": "Open", "close": "Closed"}.get(parts[2])
            if state is None:
                raise bad_request("use /queues/<name>/open or /close")
            try:
                self.sim.set_queue_state(parts[1], state)
            except KeyError as exc:
                raise ApiError(404, "NotFound", str(exc)) from exc
            queue = self.get("queues", parts[1]) or {}
            return ok({"queue": parts[1], "state": (queue.get("status") or {}).get("state")})
        if parts[:1] == ["faults"]:
            if method == "GET" and parts == ["faults"]:
                return ok(
                    {
                        "armed": self.faults.armed(),
                        "fired": self.faults.records(),
                        "count": self.faults.count(),
                    }
                )
            if method == "GET" and parts == ["faults", "count"]:
                q = req.query
                return ok(
                    {
                        "count": self.faults.count(
                            verb=q.get("verb"), resource=q.get("resource"), kind=q.get("kind")
                        )
                    }
                )
            if method == "DELETE":
                self.faults.clear()
                return ok({"cleared": True})
            if method == "POST":
                return ok(self._add_fault(body))
        raise ApiError(404, "NotFound", f"no kubesim control endpoint {req.path}")

    def _add_fault(self, body: dict[str, Any]) -> dict[str, Any]:
        kind = body.get("kind", "error")
        resource = body.get("resource", "*")
        count = int(body.get("count", 1))
        if kind == "drop":
            fault = self.faults.drop_watch_events(resource=resource, count=count)
        elif kind == "duplicate":
            fault = self.faults.duplicate_watch_events(resource=resource, count=count)
        elif kind == "gone":
            fault = self.faults.expire_next_watch(resource=resource, count=count)
        elif kind == "compact":
            self.compact()
            return {"compacted": True}
        else:
            extra = {k: body[k] for k in ("namespace", "name", "message") if k in body}
            if "status" in body:
                extra["status"] = body["status"]
            fault = self.faults.add(
                verb=body.get("verb", "*"),
                resource=resource,
                count=count,
                retry_after=body.get("retryAfter"),
                hang=body.get("hang"),
                **extra,
            )
        return {"id": fault.id, "kind": fault.kind}
