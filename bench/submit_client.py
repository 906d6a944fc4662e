"""The load client of ``submit_bench.py``: a minimal HTTP/1.1 client on asyncio streams and
the closed- and open-loop drivers that time each request (``Run``).

A sibling module of ``bench/submit_bench.py`` (bench/ is scripts, not a package): the script
puts bench/ on ``sys.path`` before importing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

HOST = "127.0.0.1"


# ---------------------------------------------------------------------------------------------
# A minimal HTTP/1.1 client on asyncio streams: pre-built requests, keep-alive, no parsing
# beyond the status line and the body's length.
# ---------------------------------------------------------------------------------------------
def http_request(
    method: str, path: str, *, port: int, token: str, body: bytes | None = None, **headers: str
) -> bytes:
    """The bytes of one request (header names as keyword arguments, ``_`` for ``-``)."""
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {HOST}:{port}",
        f"Authorization: Bearer {token}",
        "Accept: application/json",
        "X-Forwarded-Proto: https",
    ]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, keep-alive) of one response."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    start = lower.find(b"\r\ncontent-length:")
    if start >= 0:
        end = lower.index(b"\r\n", start + 2)
        body = await reader.readexactly(int(head[start + 17 : end]))
    elif b"\r\ntransfer-encoding: chunked" in lower:
        chunks = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            chunks.append((await reader.readexactly(size + 2))[:-2])
        await reader.readuntil(b"\r\n")
        body = b"".join(chunks)
    else:
        body = b""
    return status, body, b"\r\nconnection: close" not in lower


@dataclass
class Run:
    """What one phase measured: per-request latencies and what came back."""

    name: str
    latencies_ns: list[int] = field(default_factory=list)
    elapsed_s: float = 0.0
    errors: int = 0
    first_error: str = ""
    items_per_request: int = 1
    python_cpu_s: float = 0.0
    postgres_cpu_s: float = 0.0

    def extend(self, other: Run) -> None:
        self.latencies_ns += other.latencies_ns
        self.elapsed_s += other.elapsed_s
        self.python_cpu_s += other.python_cpu_s
        self.postgres_cpu_s += other.postgres_cpu_s
        self.errors += other.errors
        self.first_error = self.first_error or other.first_error

    @property
    def requests(self) -> int:
        return len(self.latencies_ns)

    @property
    def per_s(self) -> float:
        return self.requests * self.items_per_request / self.elapsed_s if self.elapsed_s else 0.0

    def cpu_ms_per_item(self, seconds: float) -> float:
        items = self.requests * self.items_per_request
        return seconds * 1000 / items if items else float("nan")

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_ns)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] / 1e6


async def _drive(
    name: str,
    port: int,
    make_request: Sequence[Callable[[int], bytes]],
    *,
    seconds: float,
    cap: int,
    expect: frozenset[int],
    items_per_request: int = 1,
) -> Run:
    """Run one closed-loop client per ``make_request`` entry until ``seconds`` or ``cap``."""
    run = Run(name, items_per_request=items_per_request)
    sent = 0
    deadline = time.perf_counter() + seconds

    async def client(make: Callable[[int], bytes]) -> None:
        nonlocal sent
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            while time.perf_counter() < deadline and sent < cap:
                sent += 1
                request = make(sent)
                began = time.perf_counter_ns()
                writer.write(request)
                if len(request) > 65536:
                    await writer.drain()
                status, body, keep_alive = await _read_response(reader)
                run.latencies_ns.append(time.perf_counter_ns() - began)
                if status not in expect:
                    run.errors += 1
                    run.first_error = run.first_error or f"{status}: {body[:300]!r}"
                if not keep_alive:
                    writer.close()
                    reader, writer = await asyncio.open_connection(HOST, port)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    began = time.perf_counter()
    await asyncio.gather(*(client(m) for m in make_request))
    run.elapsed_s = time.perf_counter() - began
    return run


async def _drive_offered(
    name: str,
    port: int,
    make_request: Sequence[Callable[[int], bytes]],
    *,
    per_s: float,
    seconds: float,
    expect: frozenset[int],
) -> Run:
    """Offer ``per_s`` requests a second for ``seconds``, spread over one connection per
    ``make_request`` entry (staggered), whatever the answers' pace: an open loop. Each latency
    runs from the request's scheduled time, so a request held up behind a slow one counts its
    wait too (no coordinated omission)."""
    run = Run(name)
    clients = len(make_request)
    interval = clients / per_s
    count = int(seconds * per_s / clients)
    start = time.perf_counter() + 0.1

    async def client(k: int, make: Callable[[int], bytes]) -> None:
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            for i in range(count):
                scheduled = start + (k / clients + i) * interval
                await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))
                writer.write(make(i))
                status, body, _keep_alive = await _read_response(reader)
                run.latencies_ns.append(int((time.perf_counter() - scheduled) * 1e9))
                if status not in expect:
                    run.errors += 1
                    run.first_error = run.first_error or f"{status}: {body[:300]!r}"
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    began = time.perf_counter()
    await asyncio.gather(*(client(k, m) for k, m in enumerate(make_request)))
    run.elapsed_s = time.perf_counter() - began
    return run
