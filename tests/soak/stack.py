"""The production shape on this machine, for the soak and fault suite.

A private PostgreSQL cluster (``initdb`` in a temporary folder) and a private, non-persistent
``redis-server``, both on free ports and both restartable, so a scenario may take them down
without touching anyone else's; kubesim in this process (its fault injector and state at
hand); and, as separate processes with the environment a deployment gives them: gunicorn, two
Celery workers (thread pools), beat and ``manage.py watch_clusters``. Nothing here restarts a
process that exits, except where a scenario kills one on purpose: the suite counts the
processes that died by themselves.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.ports import HOST, free_port, wait_port

ROOT = Path(__file__).resolve().parents[2]


def _as_postgres_user() -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the ``postgres`` account then."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        raise RuntimeError("running as root without runuser: cannot start a private PostgreSQL")
    return [runuser, "-u", "postgres", "--"]


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    raise RuntimeError(f"{name} not found: the soak needs PostgreSQL's server binaries")


class PrivatePostgres:
    """A throwaway PostgreSQL cluster on a free port (trust auth on loopback, no fsync)."""

    def __init__(self, folder: Path) -> None:
        if os.geteuid() == 0:
            # The server runs as ``postgres``, which may not enter root's private folders: its
            # data lives in a folder of its own under the system's temporary directory.
            folder = Path(tempfile.mkdtemp(prefix="gpupool-soak-pg-"))
            shutil.chown(folder, "postgres")
        self.folder = folder
        self.data = folder / "pgdata"
        self.log = folder / "postgres.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgres://postgres@{HOST}:{self.port}/gpupool"

    def init(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [*_as_postgres_user(), _pg_bin("initdb"), "-D", str(self.data), "-U", "postgres",
             "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def start(self) -> None:
        log = self.log.open("ab")
        self.proc = subprocess.Popen(
            [*_as_postgres_user(), _pg_bin("postgres"), "-D", str(self.data), "-p",
             str(self.port), "-c", f"listen_addresses={HOST}", "-c", "fsync=off", "-c",
             "synchronous_commit=off", "-c", "full_page_writes=off", "-c",
             "max_connections=200", "-c", "unix_socket_directories="],
            stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        log.close()
        wait_port(self.port, 30, self.proc)
        deadline = time.monotonic() + 30
        while True:  # listening is not accepting: wait for a real connection
            try:
                import psycopg

                with psycopg.connect(f"postgres://postgres@{HOST}:{self.port}/postgres") as conn:
                    conn.execute("SELECT 1")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def create_database(self) -> None:
        import psycopg

        with psycopg.connect(
            f"postgres://postgres@{HOST}:{self.port}/postgres", autocommit=True
        ) as conn:
            conn.execute("CREATE DATABASE gpupool")

    def stop(self, *, fast: bool = True) -> None:
        """Stop it as an operator's restart does: ``fast`` cuts every session at once (what a
        client sees of a restart); otherwise wait for the sessions to end."""
        if self.proc is None or self.proc.poll() is not None:
            return
        # The postmaster itself (runuser, when root, would not pass the signal on).
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGINT if fast else signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def restart(self, down_for: float) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()


class PrivateRedis:
    """A non-persistent redis-server on a free port: a restart empties it, as in the issue."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int) -> str:
        return f"redis://{HOST}:{self.port}/{db}"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found: the soak needs it")
        self.folder.mkdir(parents=True, exist_ok=True)
        log = (self.folder / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", HOST, "--save", "", "--appendonly",
             "no", "--dir", str(self.folder)],
            stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        log.close()
        wait_port(self.port, 10, self.proc)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # a crash, not a shutdown: nothing saved, clients cut
            self.proc.wait()

    def restart(self, down_for: float) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()


@dataclass
class Service:
    """One long-running process of the portal, restartable by name."""

    name: str
    cmd: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    killed: int = 0  # killed on purpose by a scenario (not counted as deaths)

    def start(self, env: dict[str, str]) -> None:
        with self.log.open("ab") as log:
            log.write(f"\n===== start {self.starts + 1} at {time.strftime('%X')} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.starts += 1

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the process group: nothing acks, nothing cleans up."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.killed += 1

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


@dataclass
class Stack:
    """Everything of one soak run. ``start()`` brings it up; ``close()`` takes it down."""

    folder: Path
    workers: int = 2
    concurrency: int = 4
    pool: str = "threads"
    extra_env: dict[str, str] = field(default_factory=dict)
    postgres: PrivatePostgres = field(init=False)
    redis: PrivateRedis = field(init=False)
    services: dict[str, Service] = field(default_factory=dict)
    web_port: int = 0
    _secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(50))
    _fernet_key: str = field(
        default_factory=lambda: base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
    )

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.postgres = PrivatePostgres(self.folder / "postgres")
        self.redis = PrivateRedis(self.folder / "redis")

    # -- environment ----------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        return {
            **{
                k: v
                for k, v in os.environ.items()
                if not k.startswith("PYTEST_") and k != "PROMETHEUS_MULTIPROC_DIR"
            },
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DATABASE_URL": self.postgres.url,
            "CELERY_BROKER_URL": self.redis.url(0),
            "CACHE_URL": self.redis.url(1),
            "CACHE_KEY_PREFIX": "soak",
            "GPUPOOL_CLUSTERS_QUEUE": "",
            "DEBUG": "false",
            "SECRET_KEY": self._secret_key,
            "GPUPOOL_SECRET_KEYS": self._fernet_key,
            "GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS": "true",
            "SECURE_SSL_REDIRECT": "false",
            "SUBMIT_THROTTLE_RATE": "100000/min",
            "GPUPOOL_VAR_DIR": str(self.folder / "var"),
            "LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        }

    # -- lifecycle ------------------------------------------------------------------------
    def start_storage(self) -> None:
        self.postgres.init()
        self.postgres.start()
        self.postgres.create_database()
        self.redis.start()
        (self.folder / "var").mkdir(exist_ok=True)

    def start_services(self) -> None:
        py = sys.executable
        self.web_port = free_port()
        logs = self.folder / "logs"
        logs.mkdir(exist_ok=True)
        commands: dict[str, list[str]] = {
            "web": [
                py, "-m", "gunicorn", "config.wsgi:application", "--worker-class=gthread",
                "--workers=1", "--threads=8", f"--bind={HOST}:{self.web_port}",
                "--keep-alive=30", "--timeout=120", "--log-level=warning",
            ],
            "beat": [
                py, "-m", "celery", "-A", "config", "beat", "-l", "INFO",
                "-s", str(self.folder / "var" / "celerybeat-schedule"),
            ],
            "watcher": [py, "manage.py", "watch_clusters", "--refresh", "2"],
        }  # fmt: skip
        for i in range(self.workers):
            commands[f"worker{i}"] = [
                py, "-m", "celery", "-A", "config", "worker", "-P", self.pool,
                "-c", str(self.concurrency), "-l", "INFO", "-n", f"soak{i}@%h",
            ]  # fmt: skip
        for name, cmd in commands.items():
            self.services[name] = Service(name, cmd, logs / f"{name}.log")
        env = self.env()
        for service in self.services.values():
            service.start(env)
        wait_port(self.web_port, 60, self.services["web"].proc)
        for i in range(self.workers):
            self.wait_worker_ready(f"worker{i}")

    def wait_worker_ready(self, name: str, timeout: float = 60) -> None:
        service = self.services[name]
        deadline = time.monotonic() + timeout
        marker = f"===== start {service.starts} "
        while time.monotonic() < deadline:
            text = service.log.read_text(errors="replace")
            if " ready." in text[text.rfind(marker) :]:
                return
            if not service.alive:
                raise RuntimeError(f"{name} exited:\n{service.tail()}")
            time.sleep(0.1)
        raise RuntimeError(f"{name} not ready after {timeout} s:\n{service.tail()}")

    def restart(self, name: str) -> None:
        """What a supervisor does for a process that is gone."""
        self.services[name].start(self.env())
        if name.startswith("worker"):
            self.wait_worker_ready(name)

    def deaths(self) -> dict[str, int]:
        """Processes that exited although nobody stopped them, by name."""
        return {n: 1 for n, s in self.services.items() if not s.alive}

    def close(self) -> None:
        for service in self.services.values():
            service.stop()
        self.redis.stop()
        self.postgres.stop(fast=True)
        if self.postgres.folder.parent != self.folder:
            shutil.rmtree(self.postgres.folder, ignore_errors=True)

    def worker_pids(self) -> dict[str, int]:
        return {
            n: s.proc.pid for n, s in self.services.items() if n.startswith("worker") and s.proc
        }


def describe(env: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("GPUPOOL_"))
