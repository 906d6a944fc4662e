"""A Celery worker and beat outlive a restart of their Redis broker.

Celery 5.7.0 killed every worker that held a message it had not acknowledged (a countdown
task waiting for its time, a task still running) when Redis went away: the consumer closed
the lost connection a second time after ``collect()`` had already detached its transport,
the close tried to restore the unacknowledged messages, and kombu's Redis transport failed on
``None.hostname``, an error the reconnect logic does not expect ("Unrecoverable error",
exit 1). ``requirements.in`` pins the release before it. These tests run the real processes,
as ``docker-compose.yml`` starts them, against a private ``redis-server`` they restart.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from config.celery import app
from tests.soak.stack import ROOT, PrivateRedis

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[PrivateRedis]:
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    yield redis
    redis.stop()


def _env(broker: PrivateRedis) -> dict[str, str]:
    s = connection.settings_dict
    return {
        **os.environ,
        "DATABASE_URL": f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/"
        f"{s['NAME']}",
        "CELERY_BROKER_URL": broker.url(0),
        "CACHE_URL": broker.url(1),
        "GPUPOOL_CLUSTERS_QUEUE": "",
        "PYTHONUNBUFFERED": "1",
    }


class Process:
    def __init__(self, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str, *, after: int = 0, timeout: float = 60) -> int:
        """The offset of ``text`` in the output (searched from ``after``), once it shows."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.output().find(text, after)
            if found >= 0:
                return found
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.output()}"
            time.sleep(0.1)
        raise AssertionError(f"{text!r} not seen:\n{self.output()[-4000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


def _send(broker: PrivateRedis, name: str, **options: Any) -> str:
    task_id = str(uuid.uuid4())
    with app.connection_for_write(broker.url(0)) as conn:
        app.send_task(name, task_id=task_id, connection=conn, **options)
    return task_id


def test_a_worker_holding_unacknowledged_messages_survives_a_redis_restart(broker, tmp_path):
    # The worker as docker-compose.yml runs it: prefork pool, gossip, mingle and heartbeats.
    worker = Process(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "-l", "INFO", "-c", "2",
         "-n", f"restart-{uuid.uuid4().hex[:6]}@%h"],
        _env(broker), tmp_path / "worker.log",
    )  # fmt: skip
    try:
        worker.wait_for(" ready.")
        # Countdown tasks wait in the worker, delivered and not yet acknowledged.
        held = [_send(broker, "portal.prune_api_tokens", countdown=600) for _ in range(3)]
        for task_id in held:
            worker.wait_for(task_id)
        mark = len(worker.output())

        broker.restart(down_for=2.0)

        worker.wait_for("Connected to redis", after=mark, timeout=60)
        time.sleep(1.0)  # where 5.7.0 died, right after the reconnect
        assert worker.proc.poll() is None, worker.output()[-4000:]
        assert "Unrecoverable error" not in worker.output()
        # And it still works: a new task sent after the restart runs.
        fresh = _send(broker, "portal.prune_api_tokens")
        worker.wait_for(f"Task portal.prune_api_tokens[{fresh}] succeeded", after=mark)
    finally:
        worker.stop()


def test_beat_keeps_sending_after_a_redis_restart(broker, tmp_path):
    beat = Process(
        [sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "DEBUG",
         "-s", str(tmp_path / "schedule")],
        {**_env(broker), "GPUPOOL_SCHEDULER_INTERVAL_SECONDS": "1"}, tmp_path / "beat.log",
    )  # fmt: skip
    try:
        beat.wait_for("Scheduler: Sending due task scheduling-cycle")
        broker.restart(down_for=3.0)
        mark = len(beat.output())
        beat.wait_for("Scheduler: Sending due task scheduling-cycle", after=mark, timeout=30)
        assert beat.proc.poll() is None
        # What it sent after the restart reached the broker.
        import redis

        client = redis.Redis.from_url(broker.url(0))
        try:
            assert wait_until(lambda: client.llen("celery") > 0), beat.output()[-3000:]
        finally:
            client.close()
    finally:
        beat.stop()


def wait_until(predicate: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False
