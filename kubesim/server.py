"""HTTP/1.1 transport: a threaded server with keep-alive, TLS and chunked watch streams.

The official client keeps connections in urllib3 pools, so every response carries a
``Content-Length`` (or is chunked) and connections stay open between requests. One thread serves
one connection; the TLS handshake runs in that thread, not in the accept loop. Headers and body
go out in a single write with ``TCP_NODELAY`` set, avoiding the 40 ms delayed-ACK stall that a
header write followed by a body write would cause.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn
from typing import Any

from kubesim.api import Api, Request, Response, StreamWriter

log = logging.getLogger("kubesim.http")

_REASONS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    410: "Gone",
    415: "Unsupported Media Type",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class _ChunkWriter(StreamWriter):
    def __init__(self, handler: _Handler) -> None:
        self.handler = handler

    def send(self, data: bytes) -> None:
        if data:
            self.handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def gone(self) -> bool:
        # On a watch connection the client sends nothing more; readable means EOF/close.
        sock = self.handler.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)


def _certificate_user(connection: Any) -> str | None:
    """The CN of the client certificate verified in the handshake (None without one)."""
    if not isinstance(connection, ssl.SSLSocket):
        return None
    cert = connection.getpeercert()
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kubesim"
    sys_version = ""
    timeout = 300  # idle keep-alive connections are closed after 5 minutes
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.cert_user = _certificate_user(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        request = Request.build(self.command, self.path, headers, body, self.cert_user)
        response = self.server.api.handle(request)
        self._respond(response)

    def _head(self, response: Response, chunked: bool) -> bytes:
        lines = [
            f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Unknown')}",
            f"Content-Type: {response.content_type}",
            "Cache-Control: no-cache, private",
        ]
        if chunked:
            lines.append("Transfer-Encoding: chunked")
        else:
            lines.append(f"Content-Length: {len(response.body)}")
        for name, value in response.headers.items():
            lines.append(f"{name}: {value}")
        if self.close_connection:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _respond(self, response: Response) -> None:
        if response.stream is None:
            self.wfile.write(self._head(response, False) + response.body)
            return
        self.wfile.write(self._head(response, True))
        try:
            response.stream(_ChunkWriter(self))
            self.wfile.write(b"0\r\n\r\n")
        except (OSError, ssl.SSLError):
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def do_HEAD(self) -> None:
        self.send_error(405)


class _Server(ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], api: Api, context: ssl.SSLContext | None):
        self.api = api
        self.context = context
        self.connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.address_family = family
        super().__init__(address, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        with contextlib.suppress(OSError):
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.context is not None:
            try:
                request.settimeout(10)
                request = self.context.wrap_socket(request, server_side=True)
                request.settimeout(None)
            except (OSError, ssl.SSLError) as exc:
                log.debug("TLS handshake failed: %s", exc)
                return
        with self._conn_lock:
            self.connections.add(request)
        try:
            super().finish_request(request, client_address)
        except (OSError, ssl.SSLError):
            pass
        finally:
            with self._conn_lock:
                self.connections.discard(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection error from %s", client_address, exc_info=True)

    def close_connections(self) -> None:
        with self._conn_lock:
            connections = list(self.connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class HttpServer:
    """Owns the listening socket and the accept thread."""

    def __init__(
        self,
        api: Api,
        host: str = "127.0.0.1",
        port: int = 0,
        context: ssl.SSLContext | None = None,
    ) -> None:
        self._server = _Server((host, port), api, context)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="kubesim-http",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting, close the socket and cut open connections."""
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
