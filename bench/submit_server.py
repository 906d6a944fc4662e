"""The server side of ``submit_bench.py``: the bench's database, Django data and gunicorn, and
the server's CPU (gunicorn and PostgreSQL) over each drive of the load client.

A sibling module of ``bench/submit_bench.py`` (bench/ is scripts, not a package): the script
puts bench/ and the repository root on ``sys.path`` before importing it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from submit_client import HOST, Run, _drive, _drive_offered, http_request

ROOT = Path(__file__).resolve().parent.parent

BENCH_DB = "gpupool_bench"
CLIENTS = 16
BROKER_DB = 15  # a Redis db of the bench's own: nothing consumes it; new keys are removed after


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
