"""``gpupool port-forward``: a local HTTP listener whose every request goes to an inference
job's server through the portal (``/api/v1/jobs/{id}/proxy/{path}``, which relays it through
the cluster's API server), with the user's own token, so the user's rights decide.

HTTP, not raw TCP: the portal relays requests, as ``kubectl proxy`` does, not a byte stream as
``kubectl port-forward`` does; an inference server speaks HTTP. Answers come back whole.
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

from gpupool_cli.api import Client

PROXY_TIMEOUT_SECONDS = 150  # the portal waits up to 120 s for the server's answer
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def _handler(api: Client, job_id: str, say: Callable[[str], None]) -> type[BaseHTTPRequestHandler]:
    target = f"{api.base}jobs/{job_id}/proxy/"

    class Relay(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {
                k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")
            }
            try:
                answer = api.session.request(
                    self.command,
                    target + self.path.lstrip("/"),
                    data=body or None,
                    headers=headers,
                    timeout=PROXY_TIMEOUT_SECONDS,
                )
            except requests.RequestException as error:
                say(f"{self.command} {self.path} -> the portal cannot be reached: {error}")
                self._answer(502, b"gpupool port-forward: the portal cannot be reached\n", "")
                return
            say(f"{self.command} {self.path} -> {answer.status_code}")
            self._answer(answer.status_code, answer.content, answer.headers.get("Content-Type"))

        def _answer(self, status: int, body: bytes, content_type: str | None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type or "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _relay

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request is said by _relay

    return Relay


def forward_server(
    api: Client, job_id: str, address: str, port: int, say: Callable[[str], None]
) -> ThreadingHTTPServer:
    """The listener, bound (``port`` 0: a free one); ``serve_forever`` runs it."""
    api.session.headers["Accept"] = "*/*"  # whatever the server answers, not only JSON
    server = ThreadingHTTPServer((address, port), _handler(api, job_id, say))
    server.daemon_threads = True
    return server
