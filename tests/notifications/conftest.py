"""Fixtures for the notifications: a real SMTP server (aiosmtpd) and a real HTTP receiver
that checks the webhook signature, both on 127.0.0.1, each in a thread of the test process.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from notifications.signing import (
    DELIVERY_HEADER,
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    signature_verify,
)
from tests.clusters.conftest import TEST_KEYS
from tests.ports import free_port


@pytest.fixture(autouse=True)
def _notification_settings(settings: Any) -> None:
    settings.GPUPOOL_SECRET_KEYS = TEST_KEYS
    settings.GPUPOOL_WEBHOOK_ALLOW_LOCAL = True  # the receiver listens on 127.0.0.1
    settings.GPUPOOL_WEBHOOK_ALLOW_HTTP = True
    settings.GPUPOOL_NOTIFY_BACKOFF_SECONDS = 30
    settings.GPUPOOL_NOTIFY_MAX_ATTEMPTS = 3


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.recipients: list[list[str]] = []
        # When set: keep the message, then wait for it before answering (a sender killed
        # meanwhile leaves a message that arrived but was never confirmed to it).
        self.hold: threading.Event | None = None
        self.arrived = threading.Event()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.recipients.append(list(envelope.rcpt_tos))
        self.messages.append(message_from_bytes(envelope.original_content))
        self.arrived.set()
        hold = self.hold
        if hold is not None:  # in a thread: the server's event loop keeps serving others
            await asyncio.to_thread(hold.wait, 30)
        return "250 Message accepted for delivery"


@dataclass
class SmtpServer:
    port: int
    inbox: _Inbox

    @property
    def messages(self) -> list[Message]:
        return self.inbox.messages

    @property
    def arrived(self) -> threading.Event:
        return self.inbox.arrived

    def hold(self) -> threading.Event:
        """From now on each message is kept, then answered only once the event returned is
        set (or after 30 s)."""
        self.inbox.hold = threading.Event()
        return self.inbox.hold

    def release(self) -> None:
        """Answer the held message, and hold no more."""
        if self.inbox.hold is not None:
            self.inbox.hold.set()
        self.inbox.hold = None

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Message]:
        deadline = time.monotonic() + timeout
        while len(self.inbox.messages) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.inbox.messages


@pytest.fixture
def smtp_server(settings: Any) -> Iterator[SmtpServer]:
    """A real SMTP server; Django's SMTP backend in this process points at it."""
    inbox = _Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = ""
    settings.EMAIL_HOST_PASSWORD = ""
    try:
        yield SmtpServer(port, inbox)
    finally:
        if inbox.hold is not None:
            inbox.hold.set()
        controller.stop()


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    verified: bool

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A webhook receiver as a team would write one: it checks the signature and the
    timestamp with the team's secret (``secret``, set once the webhook exists)."""

    port: int
    secret: str = ""
    received: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answers to give, in order; then 200
    answer_body: bytes = b""  # the body of every answer (an error page that says too much)
    hold: threading.Event | None = None  # when set: record, then wait for it before answering
    arrived: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def wait_for(self, count: int, timeout: float = 15.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.received


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver(port=free_port())

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            ok = signature_verify(
                state.secret,
                timestamp=self.headers.get(TIMESTAMP_HEADER),
                signature=self.headers.get(SIGNATURE_HEADER),
                body=body,
            )
            headers = {
                k: self.headers.get(k, "")
                for k in (
                    TIMESTAMP_HEADER,
                    SIGNATURE_HEADER,
                    DELIVERY_HEADER,
                    IDEMPOTENCY_HEADER,
                    "Content-Type",
                )
            }
            state.received.append(Received(headers, body, ok))
            state.arrived.set()
            if state.hold is not None:
                state.hold.wait(30)
            status = state.statuses.pop(0) if state.statuses else (200 if ok else 401)
            self.send_response(status)
            self.send_header("Content-Length", str(len(state.answer_body)))
            self.end_headers()
            if state.answer_body:
                self.wfile.write(state.answer_body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", state.port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        if state.hold is not None:
            state.hold.set()
        server.shutdown()
        server.server_close()
