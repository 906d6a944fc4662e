"""The two answers not read from the store as stored: ``pods/{name}/log`` (from the
simulated containers, followed as a stream) and ``services/{name}/proxy`` (relayed to a Ready
pod's simulated server, :mod:`kubesim.serving`).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from kubesim.api.wire import Request, Response, Route, StreamWriter, _is_int, _true
from kubesim.errors import bad_request, from_code, not_found
from kubesim.operator import DCGM_EXPORTER, DEVICE_PLUGIN, operator_log
from kubesim.serving import inference_answer, ready, service_port, split_service

OPERATOR_APPS = (DEVICE_PLUGIN, DCGM_EXPORTER)


class SubresourcesMixin:
    """Mixed into :class:`kubesim.api.core.Api`, whose ``__init__`` sets the state it reads."""

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
