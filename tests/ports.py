"""Loopback ports for the servers the tests start (SMTP, webhook receivers, gunicorn, private
PostgreSQL and Redis): a free one, and waiting until a process listens on it."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from typing import Any

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout: float, proc: subprocess.Popen[Any] | None = None) -> None:
    """Return once something accepts connections on ``port``; raise if ``proc`` exits first
    or nothing listens within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {HOST}:{port} after {timeout} s")
