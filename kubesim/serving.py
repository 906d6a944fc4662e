"""The service proxy (``/api/v1/namespaces/{ns}/services/{name}[:port]/proxy/{path}``) and
the inference server every simulated pod behind a Service runs.

The API server relays a request to one Ready endpoint of the Service, as a real one does: an
unknown Service is a 404, a port the Service does not have or a Service with no Ready pod a
503 ``ServiceUnavailable`` in the API server's words. The pod then answers as a small
OpenAI-compatible server would (a vLLM or TGI image): its readiness path and ``/health`` say
``ok``, ``GET /v1/models`` lists one model (the image's name), ``POST /v1/completions`` and
``/v1/chat/completions`` echo the prompt back, anything else is a 404. Every answer names
the pod (``X-Kubesim-Pod``), so a test sees which endpoint served it.

Pure: the caller looks up the Service and pods under the store's lock and passes them in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

JSON = "application/json"


@dataclass(frozen=True)
class Answer:
    """What the pod answered."""

    status: int
    body: bytes
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)


def split_service(name: str) -> tuple[str, str]:
    """``[scheme:]name[:port]`` (the proxy's own syntax) as (name, port or "")."""
    parts = name.split(":")
    if len(parts) == 3:  # https:name:port
        parts = parts[1:]
    if len(parts) == 2:
        return parts[0], parts[1]
    return parts[0], ""


def service_port(service: dict[str, Any], port: str) -> dict[str, Any] | None:
    """The Service's port named or numbered ``port`` (the only one when ``port`` is empty)."""
    ports = (service.get("spec") or {}).get("ports") or []
    if not port:
        return ports[0] if len(ports) == 1 else None
    for entry in ports:
        if entry.get("name") == port or str(entry.get("port")) == port:
            return entry
    return None


def ready(pod: dict[str, Any]) -> bool:
    """Running, not being deleted, and its Ready condition True: an endpoint of a Service."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _json(status: int, obj: Any, pod: str) -> Answer:
    return Answer(status, json.dumps(obj).encode(), JSON, {"X-Kubesim-Pod": pod})


def _model(pod: dict[str, Any]) -> str:
    """The image's repository name, as the model a server of that image serves."""
    containers = pod["spec"].get("containers") or [{}]
    image = str(containers[0].get("image") or "model")
    return image.rsplit("/", 1)[-1].split("@")[0].split(":")[0] or "model"


def _readiness_paths(pod: dict[str, Any]) -> set[str]:
    paths = {"/health", "/healthz", "/ready"}
    for container in pod["spec"].get("containers") or []:
        probe = (container.get("readinessProbe") or {}).get("httpGet") or {}
        if probe.get("path"):
            paths.add(str(probe["path"]))
    return paths


def inference_answer(pod: dict[str, Any], method: str, path: str, body: bytes) -> Answer:
    """What the server in ``pod`` answers to ``method path`` with ``body``."""
    name = pod["metadata"]["name"]
    path = "/" + path.lstrip("/")
    model = _model(pod)
    if method in ("GET", "HEAD") and path in _readiness_paths(pod):
        return _json(200, {"status": "ok"}, name)
    if method == "GET" and path == "/v1/models":
        return _json(
            200,
            {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "kubesim"}]},
            name,
        )
    if path in ("/v1/completions", "/v1/chat/completions"):
        if method != "POST":
            return _json(405, {"detail": "Method Not Allowed"}, name)
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = None
        if not isinstance(request, dict):
            return _json(400, {"error": {"message": "the body must be a JSON object"}}, name)
        if path == "/v1/completions":
            prompt = str(request.get("prompt", ""))
            choice: dict[str, Any] = {"index": 0, "text": f"echo: {prompt}"}
            kind = "text_completion"
        else:
            messages = request.get("messages") or [{}]
            last = messages[-1] if isinstance(messages, list) and messages else {}
            content = str(last.get("content", "")) if isinstance(last, dict) else ""
            choice = {"index": 0, "message": {"role": "assistant", "content": f"echo: {content}"}}
            kind = "chat.completion"
        choice["finish_reason"] = "stop"
        return _json(
            200,
            {
                "id": f"cmpl-{name}",
                "object": kind,
                "model": str(request.get("model") or model),
                "choices": [choice],
            },
            name,
        )
    return _json(404, {"detail": "Not Found"}, name)
