"""Benchmark of REST submission against gunicorn + PostgreSQL, next to a bare one-INSERT endpoint.

    .venv/bin/python bench/submit_bench.py [--quick] [--million] [--workers N] [--threads N]

What it does, all by itself and cleaned up afterwards:

1. drops and recreates the database ``gpupool_bench`` on the PostgreSQL of ``DATABASE_URL``,
   migrates it, seeds the GPU catalog, creates a team, 16 member users with an API token each,
   and the table of the bare endpoint;
2. starts gunicorn (``gthread``) on a free loopback port with ``DEBUG=false``, a random
   ``SECRET_KEY``, ``GPUPOOL_BENCH_ENDPOINTS=true``, the cache on Redis (``CACHE_URL``, under a
   key prefix of its own), a submit throttle rate high enough never to refuse and the default
   queued-jobs limits switched off (the bench queues 100,000s of jobs in one team);
3. drives 16 concurrent clients, one user each, over persistent HTTP/1.1 connections (one
   asyncio thread writing pre-built requests, so the client costs little of the 2 cores it
   shares with the server) against the bare endpoint and ``POST /api/v1/jobs/`` in alternating
   rounds of the same length and cap, then ``POST /api/v1/jobs/`` with an ``Idempotency-Key``;
4. submits 1,000-job batches to ``POST /api/v1/jobs/batch/``, then offers ``POST
   /api/v1/jobs/`` at 100 requests a second, open loop, for the latency a user sees below
   saturation (its p99 is the goal's; the closed-loop rounds' p99 is queueing at saturation);
5. with ``--million``: times ``GET /api/v1/jobs/`` (first page, a cursor page from the middle of
   the table, a filtered page, a small old team's page, a platform admin's page) at ~1,000 jobs,
   inserts 999,000 more with one ``INSERT … SELECT generate_series``, and times them again.

Requests go out with ``X-Forwarded-Proto: https``, as from the TLS-terminating proxy in front
of a ``DEBUG=false`` deployment (otherwise every request is an HTTPS redirect).

Why ``--workers 2 --threads 4`` by default: Python holds the GIL while it works, so one process
uses at most one core and two processes can use both; a third or fourth process only adds
context switches against PostgreSQL's backends and the client on the same 2 cores. Within a
process, a few threads overlap one request's waits on PostgreSQL and Redis with another's
Python; more than ~4 per process only queue on the GIL (its 5 ms switch interval shows up in
p99). gthread keeps idle keep-alive connections in its poller, not in a thread, so 8 threads
serve 16 persistent clients. Other shapes can be tried with ``--workers``/``--threads``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import itertools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BENCH_DB = "gpupool_bench"
CLIENTS = 16
HOST = "127.0.0.1"
BROKER_DB = 15  # a Redis db of the bench's own: nothing consumes it; new keys are removed after
GOAL_RATIO = 0.5
GOAL_P99_MS = 50.0  # at OFFERED_PER_S, open loop
OFFERED_PER_S = 100.0
GOAL_BATCH_JOBS_PER_S = 5000.0

SUBMIT_BODY: dict[str, Any] = {
    "team": "bench",
    "name": "resnet50",
    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
    "command": ["torchrun", "train.py"],
    "replicas": 2,
    "gpus_per_replica": 4,
    "min_gpu_memory_gib": 40,
    "requires_bf16": True,
}


@dataclass(frozen=True)
class Plan:
    """How long and how much each part runs (``--quick`` is a smoke test of the same steps)."""

    warmup_s: float
    rounds: int
    round_s: float
    round_cap: int
    batches: int
    batch_clients: int
    list_requests: int


FULL = Plan(
    warmup_s=2,
    rounds=3,
    round_s=5,
    round_cap=50_000,
    batches=24,
    batch_clients=2,
    list_requests=300,
)
QUICK = Plan(
    warmup_s=1,
    rounds=1,
    round_s=2,
    round_cap=10_000,
    batches=6,
    batch_clients=2,
    list_requests=60,
)


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


class ServerCpu:
    """CPU seconds used by gunicorn's processes and the bench database's PostgreSQL backends.

    The machine is shared, so throughput moves with the neighbours' load; CPU per request does
    not, much, and is what the submit path's changes are judged by. Read from ``/proc``, so it
    needs the database on this host (else it reads 0).
    """

    def __init__(self, master_pid: int | None = None) -> None:
        self.master_pid = master_pid

    def _pids(self) -> dict[int, str]:
        if self.master_pid is None:
            return {}
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [BENCH_DB],
            )
            pids = {pid: "postgres" for (pid,) in cursor.fetchall()}
        pids[self.master_pid] = "python"
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError):
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == self.master_pid:
                    pids[int(stat.parent.name)] = "python"
        return pids

    def sample(self) -> dict[int, tuple[str, float]]:
        ticks = os.sysconf("SC_CLK_TCK")
        out = {}
        for pid, kind in self._pids().items():
            with contextlib.suppress(OSError, IndexError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[pid] = (kind, (int(fields[11]) + int(fields[12])) / ticks)
        return out

    @staticmethod
    def used(
        before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], kind: str
    ) -> float:
        return sum(t - before.get(pid, (k, 0.0))[1] for pid, (k, t) in after.items() if k == kind)


SERVER_CPU = ServerCpu()


def _with_cpu(driver: Any, *args: Any, **kwargs: Any) -> Run:
    """Run one of the async drivers, with the server's CPU over it."""
    before = SERVER_CPU.sample()
    run: Run = asyncio.run(driver(*args, **kwargs))
    after = SERVER_CPU.sample()
    run.python_cpu_s = SERVER_CPU.used(before, after, "python")
    run.postgres_cpu_s = SERVER_CPU.used(before, after, "postgres")
    return run


def drive(*args: Any, **kwargs: Any) -> Run:
    """Closed loop: :func:`_drive`."""
    return _with_cpu(_drive, *args, **kwargs)


def drive_offered(*args: Any, **kwargs: Any) -> Run:
    """Open loop at a fixed offered rate: :func:`_drive_offered`."""
    return _with_cpu(_drive_offered, *args, **kwargs)


# ---------------------------------------------------------------------------------------------
# Database, Django and gunicorn
# ---------------------------------------------------------------------------------------------
def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def _with_redis_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{db}"))


def recreate_database(admin_url: str) -> None:
    import psycopg

    with psycopg.connect(_with_db(admin_url, "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")


def drop_database(admin_url: str) -> None:
    import psycopg

    with psycopg.connect(_with_db(admin_url, "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


def server_env(base: dict[str, str], var_dir: str) -> dict[str, str]:
    """The environment of the bench's Django (this process) and of gunicorn."""
    db_url = base.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpupool")
    cache_url = base.get("CACHE_URL", "redis://127.0.0.1:6379/1")
    return {
        **base,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": _with_db(db_url, BENCH_DB),
        "CACHE_URL": cache_url,
        "CACHE_KEY_PREFIX": f"gpupool-bench-{secrets.token_hex(4)}",
        "CELERY_BROKER_URL": _with_redis_db(cache_url, BROKER_DB),
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "GPUPOOL_SECRET_KEYS": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        "GPUPOOL_BENCH_ENDPOINTS": "true",
        # The client plays the TLS-terminating proxy in front of a DEBUG=false portal (its
        # requests say X-Forwarded-Proto: https): gunicorn and Django believe that only from
        # a listed proxy (gunicorn.conf.py, portal/proxies.py).
        "GPUPOOL_TRUSTED_PROXIES": "127.0.0.1",
        "SUBMIT_THROTTLE_RATE": "1000000/s",
        # One team of 16 users queues far more than the default queue limits allow (5,000 a
        # team, 1,000 a member): switched off, as the throttle above, so the figures measure
        # the submit path as before (the check's own cost is not measured here yet).
        "GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM": "0",
        "GPUPOOL_MAX_QUEUED_JOBS_PER_USER": "0",
        "GPUPOOL_VAR_DIR": var_dir,
        "LOG_LEVEL": "WARNING",
    }


@dataclass
class Fixture:
    tokens: list[str]
    list_tokens: dict[str, str] = field(default_factory=dict)
    list_teams: dict[str, list[int]] = field(default_factory=dict)
    list_owners: dict[int, int] = field(default_factory=dict)


def setup_django_data() -> Fixture:
    """Migrate, seed the catalog, create the users and tokens, the bare endpoint's table."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from portal.api.bench import BARE_TABLE_DDL
    from portal.models import Membership, Role, Team
    from portal.tokens import api_token_create

    def user(username: str, **extra: Any) -> Any:
        return get_user_model().objects.create_user(username, password=None, **extra)

    call_command("migrate", interactive=False, verbosity=0)
    call_command("seed_catalog", stdout=io.StringIO())
    with connection.cursor() as cursor:
        cursor.execute(BARE_TABLE_DDL)
    team = Team.objects.create(name="Bench", slug="bench")
    tokens = []
    for i in range(CLIENTS):
        client = user(f"bench{i:02d}")
        Membership.objects.create(user=client, team=team, role=Role.MEMBER)
        tokens.append(api_token_create(user=client, name="bench")[1])

    # The list benchmark: ten busy teams; a reader in two of them; a small team whose jobs
    # all predate the million; a platform admin who sees everything.
    fixture = Fixture(tokens=tokens)
    busy = [Team.objects.create(name=f"Busy {i}", slug=f"busy{i}") for i in range(10)]
    quiet = Team.objects.create(name="Quiet", slug="quiet")
    reader, newcomer = user("reader"), user("newcomer")
    admin = user("platform", is_staff=True)
    for t in busy[:2]:
        Membership.objects.create(user=reader, team=t, role=Role.MEMBER)
    Membership.objects.create(user=newcomer, team=quiet, role=Role.MEMBER)
    for t in busy:
        owner = user(f"owner-{t.slug}")
        Membership.objects.create(user=owner, team=t, role=Role.MEMBER)
        fixture.list_owners[t.pk] = owner.pk
    fixture.list_owners[quiet.pk] = newcomer.pk
    fixture.list_teams = {"busy": [t.pk for t in busy], "all": [t.pk for t in [*busy, quiet]]}
    for u in (reader, newcomer, admin):
        fixture.list_tokens[u.username] = api_token_create(user=u, name="bench")[1]
    connection.close()
    return fixture


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def gunicorn(
    env: dict[str, str], *, workers: int, threads: int, log_path: Path
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A gunicorn serving the portal on a free loopback port; stopped on exit."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "gunicorn",
        "config.wsgi:application",
        "--worker-class=gthread",
        f"--workers={workers}",
        f"--threads={threads}",
        f"--bind={HOST}:{port}",
        "--keep-alive=30",
        "--timeout=120",
        "--log-level=warning",
        f"--error-logfile={log_path}",
    ]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True
        )
    try:
        yield port, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # quick shutdown of the master and its workers
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def wait_until_serving(port: int, token: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    request = http_request("GET", "/api/v1/teams/", port=port, token=token)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"gunicorn exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            run = drive(
                "ready", port, [lambda _n: request], seconds=1, cap=1, expect=frozenset({200})
            )
        except OSError:  # not listening yet
            time.sleep(0.2)
            continue
        if run.errors:
            raise SystemExit(f"gunicorn answers {run.first_error}")
        return
    raise SystemExit(f"gunicorn did not answer within 60 s:\n{log.read_text()[-3000:]}")


def cleanup_redis(env: dict[str, str], broker_keys_before: set[bytes]) -> None:
    import redis

    cache = redis.Redis.from_url(env["CACHE_URL"])
    keys = list(cache.scan_iter(match=f"{env['CACHE_KEY_PREFIX']}:*"))
    if keys:
        cache.delete(*keys)
    broker = redis.Redis.from_url(env["CELERY_BROKER_URL"])
    new = set(broker.scan_iter()) - broker_keys_before
    if new:
        broker.delete(*new)


# ---------------------------------------------------------------------------------------------
# The phases
# ---------------------------------------------------------------------------------------------
def bench_single(port: int, tokens: list[str], plan: Plan) -> tuple[Run, Run, Run]:
    """Bare endpoint vs POST /api/v1/jobs/ in alternating rounds; then with Idempotency-Key."""
    body = json.dumps(SUBMIT_BODY).encode()
    bare_requests = [
        http_request("POST", "/api/bench/bare-insert/", port=port, token=t, body=body)
        for t in tokens
    ]
    submit_requests = [
        http_request("POST", "/api/v1/jobs/", port=port, token=t, body=body) for t in tokens
    ]
    bare_clients = [lambda _n, r=r: r for r in bare_requests]
    submit_clients = [lambda _n, r=r: r for r in submit_requests]
    serial = itertools.count()  # a new key for every request of every round
    keyed_clients = [
        lambda _n, t=t: http_request(
            "POST",
            "/api/v1/jobs/",
            port=port,
            token=t,
            body=body,
            Idempotency_Key=f"k{next(serial)}",
        )
        for t in tokens
    ]
    created = frozenset({201})
    for clients in (bare_clients, submit_clients, keyed_clients):  # warm every code path
        drive("warmup", port, clients, seconds=plan.warmup_s, cap=plan.round_cap, expect=created)
    bare, submit, keyed = Run("bare"), Run("submit"), Run("keyed")
    for _ in range(plan.rounds):
        for total, clients in ((bare, bare_clients), (submit, submit_clients)):
            total.extend(
                drive(
                    total.name,
                    port,
                    clients,
                    seconds=plan.round_s,
                    cap=plan.round_cap,
                    expect=created,
                )
            )
    for _ in range(plan.rounds):
        keyed.extend(
            drive(
                "keyed",
                port,
                keyed_clients,
                seconds=plan.round_s,
                cap=plan.round_cap,
                expect=created,
            )
        )
    return bare, submit, keyed


def bench_offered(port: int, tokens: list[str], plan: Plan) -> Run:
    """POST /api/v1/jobs/ at ``OFFERED_PER_S`` a second, open loop: the latency a user sees
    on a busy day, not at the server's saturation (the closed-loop rounds' p99)."""
    body = json.dumps(SUBMIT_BODY).encode()
    path = "/api/v1/jobs/"
    requests = [http_request("POST", path, port=port, token=t, body=body) for t in tokens]
    clients = [lambda _n, r=r: r for r in requests]
    return drive_offered(
        "offered",
        port,
        clients,
        per_s=OFFERED_PER_S,
        seconds=plan.rounds * plan.round_s * 2,
        expect=frozenset({201}),
    )


def bench_batch(port: int, tokens: list[str], plan: Plan) -> Run:
    body = json.dumps({"jobs": [{**SUBMIT_BODY, "name": f"sweep-{i}"} for i in range(1000)]})
    requests = [
        http_request("POST", "/api/v1/jobs/batch/", port=port, token=t, body=body.encode())
        for t in tokens[: plan.batch_clients]
    ]
    clients = [lambda _n, r=r: r for r in requests]
    created = frozenset({201})
    drive("warmup", port, clients, seconds=60, cap=plan.batch_clients, expect=created)
    return drive(
        "batch",
        port,
        clients,
        seconds=600,
        cap=plan.batches,
        expect=created,
        items_per_request=1000,
    )


def insert_jobs(*, first: int, count: int, team_ids: list[int], owners: dict[int, int]) -> float:
    """Insert ``count`` queued/finished jobs round-robin over ``team_ids`` in one statement.

    Columns come from the Job model: the ones a list page shows are generated per row; every
    other column gets the field's default, so a column added later needs no change here unless
    it is required and has no default (then this stops and names it).
    """
    from django.db import connection

    from portal.models import Job

    n = len(team_ids)
    team = f"(ARRAY{team_ids}::bigint[])[1 + mod(g, {n})]"
    owner = f"(ARRAY{[owners[t] for t in team_ids]}::bigint[])[1 + mod(g, {n})]"
    at = "now() - interval '1 second' * (%(last)s - g)"
    generated = {
        "id": None,
        "public_id": "gen_random_uuid()",
        "team_id": team,
        "owner_id": owner,
        "name": "'job-' || g",
        # Independent of the team (mod 10), so every team has queued and finished jobs.
        "state": "CASE WHEN mod(g, 7) < 5 THEN 'SUCCEEDED' ELSE 'QUEUED' END",
        "image": "'nvcr.io/nvidia/pytorch:24.05-py3'",
        "command": """'["torchrun", "train.py"]'::jsonb""",
        "replicas": "1 + mod(g, 4)",
        "gpus_per_replica": "1 + mod(g, 8)",
        "cpu_millicores": "4000",
        "memory_mib": "16384",
        "max_runtime_seconds": "86400",
        "state_changed_at": at,
        "submitted_at": at,
        "request_fingerprint": "md5(g::text)",
    }
    columns, values, params = [], [], {"first": first, "last": first + count - 1}
    for f in Job._meta.concrete_fields:
        expr = generated.get(f.column, "")
        if expr is None:
            continue
        if not expr:
            if f.has_default() or (f.empty_strings_allowed and not f.null):
                params[f.column] = f.get_db_prep_save(f.get_default(), connection)
                expr = f"%({f.column})s"
            elif f.null:
                continue
            else:
                raise SystemExit(f"insert_jobs: give a value for the new column {f.column!r}")
        columns.append(connection.ops.quote_name(f.column))
        values.append(expr)
    sql = (
        f"INSERT INTO portal_job ({', '.join(columns)}) "
        f"SELECT {', '.join(values)} FROM generate_series(%(first)s, %(last)s) AS g"
    )
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        cursor.execute("ANALYZE portal_job")
    return time.perf_counter() - began


def list_paths() -> dict[str, tuple[str, str]]:
    """Label → (user, path) of the list requests; the cursor is filled in per table size."""
    return {
        "member of 2 teams, first page": ("reader", "/api/v1/jobs/"),
        "member of 2 teams, cursor page": ("reader", "/api/v1/jobs/?cursor={cursor}"),
        "member, ?team=busy1&state=QUEUED": ("reader", "/api/v1/jobs/?team=busy1&state=QUEUED"),
        "small old team, first page": ("newcomer", "/api/v1/jobs/"),
        "platform admin, first page": ("platform", "/api/v1/jobs/"),
    }


def bench_list(port: int, fixture: Fixture, plan: Plan) -> dict[str, Run]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) FROM portal_job")
        (max_id,) = cursor.fetchone()
    cursor_token = quote(base64.b64encode(f"p={max_id // 2}".encode()).decode())
    results = {}
    for label, (user, path) in list_paths().items():
        request = http_request(
            "GET", path.format(cursor=cursor_token), port=port, token=fixture.list_tokens[user]
        )
        clients = [lambda _n, r=request: r]
        drive("warmup", port, clients, seconds=0.5, cap=20, expect=frozenset({200}))
        results[label] = drive(
            label, port, clients, seconds=60, cap=plan.list_requests, expect=frozenset({200})
        )
    return results


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------
def _check_errors(*runs: Run) -> None:
    for run in runs:
        if run.errors:
            raise SystemExit(
                f"{run.name}: {run.errors} unexpected responses, first {run.first_error}"
            )


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def print_submit(
    bare: Run, submit: Run, keyed: Run, batch: Run, offered: Run, *, title: str
) -> None:
    print(title)
    print(
        f"  {'endpoint':<40} {'requests':>9} {'jobs/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'CPU ms/job: gunicorn':>20} {'postgres':>8}"
    )
    rows = [
        ("bare DRF endpoint, one INSERT", bare),
        ("POST /api/v1/jobs/", submit),
        ("POST /api/v1/jobs/ + Idempotency-Key", keyed),
        ("POST /api/v1/jobs/batch/ (1,000 jobs)", batch),
        (f"POST /api/v1/jobs/ at {OFFERED_PER_S:.0f}/s offered", offered),
    ]
    for label, run in rows:
        print(
            f"  {label:<40} {run.requests:>9,} {run.per_s:>8,.0f} "
            f"{run.percentile_ms(0.5):>7.1f} {run.percentile_ms(0.99):>7.1f} "
            f"{run.cpu_ms_per_item(run.python_cpu_s):>20.2f} "
            f"{run.cpu_ms_per_item(run.postgres_cpu_s):>8.2f}"
        )
    ratio = submit.per_s / bare.per_s if bare.per_s else 0.0
    p99 = offered.percentile_ms(0.99)
    bare_cpu = bare.cpu_ms_per_item(bare.python_cpu_s + bare.postgres_cpu_s)
    submit_cpu = submit.cpu_ms_per_item(submit.python_cpu_s + submit.postgres_cpu_s)
    if submit_cpu > 0:  # what the throughput ratio would be on two cores of its own
        print(f"  submit/bare by server CPU per job: {bare_cpu / submit_cpu:.2f}")
    print(
        f"  submit/bare {ratio:.2f} (goal >= {GOAL_RATIO}: {_verdict(ratio >= GOAL_RATIO)}); "
        f"submit p99 at {OFFERED_PER_S:.0f}/s {p99:.1f} ms "
        f"(goal < {GOAL_P99_MS:.0f}: {_verdict(p99 < GOAL_P99_MS)}); "
        f"batch {batch.per_s:,.0f} jobs/s "
        f"(goal >= {GOAL_BATCH_JOBS_PER_S:,.0f}: {_verdict(batch.per_s >= GOAL_BATCH_JOBS_PER_S)})"
    )


def print_list(small: dict[str, Run], large: dict[str, Run], insert_s: float, n: int) -> None:
    print(
        f"job list, 1 client, {n} requests each; 999,000 jobs inserted in {insert_s:.1f} s "
        "(incl. ANALYZE)"
    )
    print(f"  {'GET /api/v1/jobs/':<36} {'~1,000 jobs':>17} {'1,000,000 jobs':>17}")
    print(f"  {'':<36} {'p50 ms':>8} {'p99 ms':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for label in small:
        a, b = small[label], large[label]
        print(
            f"  {label:<36} {a.percentile_ms(0.5):>8.1f} {a.percentile_ms(0.99):>8.1f} "
            f"{b.percentile_ms(0.5):>8.1f} {b.percentile_ms(0.99):>8.1f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run of every step")
    parser.add_argument("--million", action="store_true", help="also time the list at 1M jobs")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn processes (default 2)")
    parser.add_argument("--threads", type=int, default=4, help="threads per process (default 4)")
    parser.add_argument("--keep-db", action="store_true", help=f"leave {BENCH_DB} in place")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL

    admin_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpupool")
    if not admin_url.startswith(("postgres://", "postgresql://")):
        raise SystemExit("submit_bench needs PostgreSQL: set DATABASE_URL=postgres://…")
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as var_dir:
        env = server_env(dict(os.environ), var_dir)
        os.environ.update(env)
        import redis

        broker_before = set(redis.Redis.from_url(env["CELERY_BROKER_URL"]).scan_iter())
        recreate_database(admin_url)
        try:
            began = time.perf_counter()
            fixture = setup_django_data()
            log = Path(var_dir) / "gunicorn.log"
            with gunicorn(env, workers=args.workers, threads=args.threads, log_path=log) as (
                port,
                proc,
            ):
                wait_until_serving(port, fixture.tokens[0], proc, log)
                SERVER_CPU.master_pid = proc.pid
                print(
                    f"submit bench: gunicorn gthread {args.workers} workers x {args.threads} "
                    f"threads, {CLIENTS} clients, {plan.rounds} x {plan.round_s:g} s per "
                    f"endpoint (set up in {time.perf_counter() - began:.1f} s)",
                    flush=True,
                )
                bare, submit, keyed = bench_single(port, fixture.tokens, plan)
                batch = bench_batch(port, fixture.tokens, plan)
                offered = bench_offered(port, fixture.tokens, plan)
                _check_errors(bare, submit, keyed, batch, offered)
                print_submit(
                    bare,
                    submit,
                    keyed,
                    batch,
                    offered,
                    title=f"  (batch: {plan.batch_clients} clients, {plan.batches} batches)",
                )
                if args.million:
                    from django.db import connection

                    with connection.cursor() as cursor:
                        cursor.execute(
                            "TRUNCATE portal_job RESTART IDENTITY CASCADE"
                        )  # events etc.
                    owners = fixture.list_owners
                    insert_jobs(
                        first=1, count=1000, team_ids=fixture.list_teams["all"], owners=owners
                    )
                    small = bench_list(port, fixture, plan)
                    insert_s = insert_jobs(
                        first=1001,
                        count=999_000,
                        team_ids=fixture.list_teams["busy"],
                        owners=owners,
                    )
                    large = bench_list(port, fixture, plan)
                    _check_errors(*small.values(), *large.values())
                    print_list(small, large, insert_s, plan.list_requests)
                if proc.poll() is not None:
                    raise SystemExit(f"gunicorn died:\n{log.read_text()[-3000:]}")
        finally:
            from django.db import connections

            connections.close_all()
            cleanup_redis(env, broker_before)
            if not args.keep_db:
                drop_database(admin_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
