"""Loopback ports for the servers the tests start (SMTP, webhook receivers, gunicorn, private
PostgreSQL and Redis): a free one, and waiting until a process listens on it."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[1]


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


@contextlib.contextmanager
def gunicorn_running(env: dict[str, str], log_path: Path, *options: str) -> Iterator[str]:
    """The portal as deployed: ``gunicorn config.wsgi`` started in the repo's root (so it reads
    ``gunicorn.conf.py``) on a free port, with ``env`` and gunicorn ``options``; yields its base
    URL, stops it on exit and prints the tail of its log (shown when the test fails)."""
    port = free_port()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "config.wsgi:application",
                f"--bind={HOST}:{port}",
                *options,
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_port(port, 60, proc)
        yield f"http://{HOST}:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        print(log_path.read_text(errors="replace")[-3000:])
