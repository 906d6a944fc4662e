"""Fixtures for the clusters app: kubesim over HTTPS, a real Celery worker, registered clusters.

* ``sim``: a private kubesim per test (port 0, its own CA, time frozen: nothing time-based
  happens until the test calls ``sim.advance``; controllers still react at once).
* ``celery_worker``: one ``celery -A config worker`` process per pytest-xdist worker, for the
  whole session, consuming a queue of its own on a Redis database of its own (8 + the xdist
  index), with ``DATABASE_URL`` pointing at this session's *test* database. Tests that use it
  must be ``transactional_db`` so the worker sees their rows. Its output goes to a file the
  secrets test reads.
* ``private_worker``: workers of one test on a queue of their own (``.start()`` one, ``.kill()``
  it with SIGKILL, start another): for the fault tests that kill a worker mid-task. Clusters
  tasks published during the test go to that queue.
* ``cluster``: kubesim registered through ``cluster_register`` (credentials encrypted), its
  inventory read, the team queue created.
* ``watchers``: the status watchers (jobs and pods) running in threads of this process.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections

from clusters.kubeconfig import parse_kubeconfig
from clusters.models import Cluster
from kubesim import KubeSim
from portal import hooks
from tests.builders import admitted_job

ROOT = Path(__file__).resolve().parents[2]
# Fixed test keys (never used anywhere else): the first seals, the second only opens.
TEST_KEYS = [
    "vS1f29FhfS3-9qSJ6tonX4gMcFeisqvLRfxwjmjJUkc=",
    "ni275Kw9zX1dblvT2Xssxo5jL-qfVcGwPYyKlRJ3Lho=",
]
BACKOFF_MS = 100
MAX_ATTEMPTS = 5
TIMEOUT_SECONDS = 2


@pytest.fixture(autouse=True)
def _cluster_settings(settings: Any) -> None:
    settings.GPUPOOL_SECRET_KEYS = TEST_KEYS
    settings.GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS = True
    settings.GPUPOOL_DISPATCH_BACKOFF_MS = BACKOFF_MS
    settings.GPUPOOL_DISPATCH_MAX_ATTEMPTS = MAX_ATTEMPTS
    settings.GPUPOOL_CLUSTER_TIMEOUT_SECONDS = TIMEOUT_SECONDS


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    """Clients are cached per process by cluster; each test has its own kubesim."""
    from clusters.clients import clusters_forget_clients

    yield
    clusters_forget_clients()


# ---------------------------------------------------------------------------------------------
# kubesim
# ---------------------------------------------------------------------------------------------
SMALL: dict[str, Any] = {
    "name": "small",
    "simulation": {
        "podStartupSeconds": 2,
        "defaultDurationSeconds": 300,
        "podTerminationSeconds": 1,
        "bookmarkIntervalSeconds": 0.2,
    },
    "namespaces": ["gpupool", "gpupool-system"],
    "nodePools": [
        {
            "name": "a100",
            "count": 2,
            "gpuModel": "a100-80gb",
            "gpus": 8,
            "cpu": 128,
            "memory": "1Ti",
        },
        {
            "name": "a100-mig",
            "count": 1,
            "gpuModel": "a100-80gb",
            "gpus": 8,
            "cpu": 128,
            "memory": "1Ti",
            "mig": {"gpus": 4, "profiles": {"1g.10gb": 14, "3g.40gb": 4}},
        },
        {
            "name": "v100",
            "count": 2,
            "gpuModel": "v100-32gb",
            "gpus": 4,
            "cpu": 48,
            "memory": "384Gi",
        },
        {"name": "t4", "count": 2, "gpuModel": "t4", "gpus": 1, "cpu": 16, "memory": "64Gi"},
        {
            "name": "mystery",
            "count": 1,
            "gpus": 2,
            "product": "NVIDIA-B300-SXM6-288GB",
            "gpuTypeLabel": "b300",
            "cpu": 64,
            "memory": "512Gi",
        },
        {"name": "cpu", "count": 1, "cpu": 32, "memory": "128Gi"},
    ],
}


def two_a100(**simulation: Any) -> dict[str, Any]:
    """A pool of two 8-GPU A100 nodes and nothing else: every GPU is in one (cluster, model)."""
    return {
        "name": "two-a100",
        "simulation": {**SMALL["simulation"], **simulation},
        "namespaces": ["gpupool"],
        "nodePools": [
            {"name": "a100", "count": 2, "gpuModel": "a100-80gb", "gpus": 8, "cpu": 256,
             "memory": "2Ti"}
        ],
    }  # fmt: skip


@pytest.fixture
def sim_config() -> dict[str, Any]:
    return SMALL


@pytest.fixture
def sim(sim_config: dict[str, Any]) -> Iterator[KubeSim]:
    with KubeSim(sim_config, clock_speed=0) as server:
        yield server


def kubeconfig_text(sim: KubeSim, token: str | None = None, namespace: str = "gpupool") -> str:
    import yaml

    config = sim.kubeconfig_dict(token=token, namespace=namespace)
    config.pop("preferences", None)
    return yaml.safe_dump(config)


# ---------------------------------------------------------------------------------------------
# A registered cluster
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def register(catalog: None) -> Callable[..., Cluster]:
    from clusters.registration import cluster_register

    def make(sim: KubeSim, name: str = "sim", token: str | None = None, **options: Any) -> Cluster:
        credentials = parse_kubeconfig(kubeconfig_text(sim, token=token))
        cluster, _ = cluster_register(name=name, credentials=credentials, **options)
        return cluster

    return make


@pytest.fixture
def cluster(sim: KubeSim, register: Callable[..., Cluster], vision: Any) -> Cluster:
    """kubesim, registered, inventory read, and Vision's queue in place."""
    from clusters.inventory import inventory_sync
    from clusters.queues import TeamQueue, queues_sync

    registered = register(sim)
    assert inventory_sync(cluster=registered).ok
    queues_sync(cluster=registered, desired=[TeamQueue("vision", 100, {"nvidia.com/gpu": 64})])
    registered.refresh_from_db()
    return registered


# ---------------------------------------------------------------------------------------------
# The Celery worker process
# ---------------------------------------------------------------------------------------------
class WorkerProcess:
    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        log_path: Path,
        queue: str,
        broker: str,
        log_file: Any = None,
        app_name: str = "",
    ) -> None:
        self.proc = proc
        self.log_path = log_path
        self.queue = queue
        self.broker = broker
        self.hostname = f"{queue}@{socket.gethostname()}"
        self.log_file = log_file
        # The PostgreSQL application_name of its connections (PGAPPNAME), to find them.
        self.app_name = app_name

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def quiesce(self, timeout: float = 20.0) -> None:
        """Drop what is queued or scheduled and wait for running tasks to finish, so no task
        of this test runs into the next one (or into the table flush between them)."""
        import redis

        from config.celery import app

        client = redis.Redis.from_url(self.broker)
        inspect = app.control.inspect(destination=[self.hostname], timeout=2.0, limit=1)
        deadline = time.monotonic() + timeout
        quiet = 0
        try:
            while quiet < 2 and time.monotonic() < deadline:
                client.delete(self.queue)
                scheduled = [
                    t["request"]["id"] for ts in (inspect.scheduled() or {}).values() for t in ts
                ]
                reserved = [t["id"] for ts in (inspect.reserved() or {}).values() for t in ts]
                active = [t["id"] for ts in (inspect.active() or {}).values() for t in ts]
                if scheduled or reserved:
                    app.control.revoke(scheduled + reserved, destination=[self.hostname])
                quiet = quiet + 1 if not active else 0
                time.sleep(0.05)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL the worker and its pool children at once: nothing acks, nothing cleans up."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group: pool children too
        self.proc.wait(timeout=10)
        self._close_log()

    def stop(self) -> None:
        """Warm shutdown (running tasks finish), then SIGKILL if it takes too long."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        self._close_log()

    def _close_log(self) -> None:
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None


def _database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] or ""
    if s.get("PASSWORD"):
        auth += f":{s['PASSWORD']}"
    host = s.get("HOST") or "127.0.0.1"
    port = s.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{s['NAME']}"


def _test_broker() -> tuple[str, str]:
    """(broker URL, xdist worker name): Redis database 8 + the xdist index."""
    xdist = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int("".join(c for c in xdist if c.isdigit()) or 0)
    redis = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")
    return f"{redis}/{8 + index}", xdist


def worker_start(
    *,
    queue: str,
    broker: str,
    database_url: str,
    log_path: Path,
    app_name: str = "",
    concurrency: int = 2,
    extra_env: dict[str, str] | None = None,
) -> WorkerProcess:
    """Start ``celery -A config worker`` on ``queue`` in its own process group; wait until
    it is ready. Its ``concurrency`` tasks may all be for one cluster unless ``extra_env``
    sets ``GPUPOOL_CLUSTER_TASK_SLOTS`` (the tests of that bound do)."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker,
        "GPUPOOL_CLUSTERS_QUEUE": queue,
        "GPUPOOL_SECRET_KEYS": ",".join(TEST_KEYS),
        "GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS": "true",
        "GPUPOOL_DISPATCH_BACKOFF_MS": str(BACKOFF_MS),
        "GPUPOOL_DISPATCH_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
        "GPUPOOL_CLUSTER_TIMEOUT_SECONDS": str(TIMEOUT_SECONDS),
        "DB_CONN_MAX_AGE": "0",
        "PYTHONUNBUFFERED": "1",
        "GPUPOOL_CLUSTER_TASK_SLOTS": str(concurrency),
        **(extra_env or {}),
    }
    if app_name:
        env["PGAPPNAME"] = app_name
    cmd = [
        sys.executable, "-m", "celery", "-A", "config", "worker",
        "-Q", queue, "-c", str(concurrency), "-l", "INFO", "--without-gossip", "--without-mingle",
        "--without-heartbeat", "-n", f"{queue}@%h",
    ]  # fmt: skip
    log_file = log_path.open("wb")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
    )
    worker = WorkerProcess(proc, log_path, queue, broker, log_file=log_file, app_name=app_name)
    deadline = time.monotonic() + 60
    while True:
        text = log_path.read_text(errors="replace")
        if " ready." in text:
            return worker
        if proc.poll() is not None or time.monotonic() > deadline:
            worker.stop()
            raise RuntimeError(f"the Celery worker did not start:\n{text[-3000:]}")
        time.sleep(0.1)


_APP_KEYS = ("broker_url", "broker_read_url", "broker_write_url", "task_routes")


def _app_reset_connections() -> None:
    from config.celery import app

    app._pool = None
    app.amqp._producer_pool = None
    app.amqp.flush_routes()
    # The router is a cached property holding the old route table: a task published earlier
    # in this process (a submit's cycle request, say) would keep clusters tasks off our queue.
    app.amqp.__dict__.pop("router", None)


@contextmanager
def app_publishing_to(broker: str, queue: str, tasks: str = "clusters") -> Iterator[None]:
    """While inside, this process publishes the ``tasks`` app's tasks to ``queue`` on
    ``broker``; the previous broker and routes come back on the way out."""
    from config.celery import app

    previous = {key: app.conf[key] for key in _APP_KEYS}
    app.conf.update(broker_url=broker, broker_read_url=broker, broker_write_url=broker)
    app.conf.task_routes = {f"{tasks}.*": {"queue": queue}}
    _app_reset_connections()
    try:
        yield
    finally:
        app.conf.update(previous)
        _app_reset_connections()


@pytest.fixture(scope="session")
def celery_worker_process(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    broker, xdist = _test_broker()
    queue = f"gpupool-clusters-test-{xdist}-{os.getpid()}"
    with django_db_blocker.unblock():
        database_url = _database_url()
    log_path = tmp_path_factory.mktemp("celery") / "worker.log"
    worker = worker_start(queue=queue, broker=broker, database_url=database_url, log_path=log_path)
    try:
        # This process publishes to the worker's broker and queue from now on.
        with app_publishing_to(broker, queue):
            yield worker
    finally:
        worker.stop()
        _drop_queue(broker, queue)


@pytest.fixture
def celery_worker(
    celery_worker_process: WorkerProcess, transactional_db: Any
) -> Iterator[WorkerProcess]:
    """The session's worker, quiet again when the test ends."""
    yield celery_worker_process
    celery_worker_process.quiesce()


class PrivateWorkers:
    """Workers of one test on a queue of their own, which the test may kill and restart."""

    def __init__(self, queue: str, broker: str, database_url: str, folder: Path) -> None:
        self.queue = queue
        self.broker = broker
        self.database_url = database_url
        self.folder = folder
        self.started: list[WorkerProcess] = []

    def start(self, **options: Any) -> WorkerProcess:
        """A fresh worker process on the test's queue (its connections are named after it);
        ``options`` go to :func:`worker_start` (``concurrency``, ``extra_env``)."""
        worker = worker_start(
            queue=self.queue,
            broker=self.broker,
            database_url=self.database_url,
            log_path=self.folder / f"worker-{len(self.started)}.log",
            app_name=self.queue[:63],
            **options,
        )
        self.started.append(worker)
        return worker

    def stop(self) -> None:
        for worker in self.started:
            worker.stop()


@pytest.fixture
def private_worker(transactional_db: Any, tmp_path: Path) -> Iterator[PrivateWorkers]:
    """``private_worker.start()`` → a worker of this test only; clusters tasks go to its queue
    while the test runs. Every worker it started is stopped at the end, and whatever a killed
    one left behind (its queue, its unacknowledged messages) is dropped."""
    broker, xdist = _test_broker()
    queue = f"gpupool-private-{xdist}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    workers = PrivateWorkers(queue, broker, _database_url(), tmp_path)
    try:
        with app_publishing_to(broker, queue):
            yield workers
    finally:
        workers.stop()
        _drop_queue(broker, queue)


def _drop_queue(broker: str, queue: str) -> None:
    import json

    import redis

    try:
        client = redis.Redis.from_url(broker)
        client.delete(
            queue,
            f"{queue}\x06\x161",
            f"{queue}\x06\x162",
            f"_kombu.binding.{queue}",
            f"_kombu.binding_permanent.{queue}",
        )
        # A worker killed with messages in hand leaves them in kombu's unacked hash, to be
        # restored to this (dead) queue after the visibility timeout: drop them now.
        for tag, raw in client.hgetall("unacked").items():
            try:
                routing_key = json.loads(raw)[2]
            except (ValueError, IndexError, TypeError):
                continue
            if routing_key == queue:
                client.hdel("unacked", tag)
                client.zrem("unacked_index", tag)
        client.close()
    except Exception:  # cleanup only
        pass


# ---------------------------------------------------------------------------------------------
# Watchers in threads of this process
# ---------------------------------------------------------------------------------------------
class Watchers:
    def __init__(self) -> None:
        self.items: list[tuple[Any, threading.Thread]] = []

    def start(self, cluster: Cluster, *resources: str, timeout: int = 30) -> list[Any]:
        from clusters.watch import ResourceWatcher

        started = []
        for resource in resources or ("jobs", "pods"):
            watcher = ResourceWatcher(
                cluster_id=cluster.pk,
                resource=resource,
                stop=threading.Event(),
                holder=f"test-{resource}",
                watch_timeout=timeout,
            )
            thread = threading.Thread(target=watcher.run, daemon=True)
            thread.start()
            self.items.append((watcher, thread))
            if resource != "nodes":
                early = threading.Thread(target=self._apply_early, args=(watcher,), daemon=True)
                early.start()
                self.items.append((watcher, early))
            started.append(watcher)
        return started

    @staticmethod
    def _apply_early(watcher: Any) -> None:
        """What the supervisor (``clusters.watch.WatchSupervisor``) does every second: apply
        the events kept for jobs whose dispatch had not recorded SUBMITTED yet."""
        from django.db import close_old_connections

        while not watcher.stop.wait(0.5):
            try:
                watcher.apply_early()
            except Exception:  # the database of a test that is ending
                pass
            finally:
                close_old_connections()
        connections.close_all()

    def stop(self) -> None:
        for watcher, _ in self.items:
            watcher.abort()
        for _, thread in self.items:
            thread.join(timeout=10)
        self.items.clear()


@pytest.fixture
def watchers(transactional_db: Any) -> Iterator[Watchers]:
    running = Watchers()
    yield running
    running.stop()
    connections.close_all()


# ---------------------------------------------------------------------------------------------
# Jobs, admitted by hand (what the scheduling cycle does)
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def admit(bob: Any) -> Callable[..., Any]:
    """``admit(cluster, model="a100-80gb", nodes=[...], **job fields)`` → an ADMITTED job."""

    def make(
        cluster: Cluster,
        *,
        model: str = "a100-80gb",
        nodes: list[str] | None = None,
        **fields: Any,
    ) -> Any:
        fields.setdefault("command", ["sh", "-c", "sleep 60"])
        fields.setdefault("replicas", 1)
        default_node = f"{'a100' if model.startswith('a100') else model}-0"
        plan = nodes or [default_node] * fields["replicas"]
        return admitted_job(
            cluster=cluster,
            model=model,
            plan=plan,
            message="admitted by the test",
            team=bob.memberships.first().team,
            owner=bob,
            **fields,
        )

    return make


def dispatch(*jobs: Any) -> None:
    """Hand jobs to the clusters app the way the scheduling cycle does (``hooks.admitted``)."""
    for hook in hooks.admitted.listeners:
        hook([j.pk for j in jobs])


# How long a test waits for what a worker, a watch or kubesim does on its own. The waits end as
# soon as the thing happens (tens of milliseconds on a quiet machine); the bound only matters
# when it never does, and on a loaded 2-core machine "eventually" can take tens of seconds.
PATIENCE = 45.0


def wait_for(
    predicate: Callable[[], Any], timeout: float = PATIENCE, interval: float = 0.05
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def state_of(job: Any) -> str:
    from portal.models import Job

    return str(Job.objects.values_list("state", flat=True).get(pk=job.pk))


def wait_state(job: Any, *states: str, timeout: float = PATIENCE) -> str:
    state = wait_for(lambda: (s := state_of(job)) in states and s, timeout=timeout)
    assert state, f"job {job.pk} stayed {state_of(job)}, expected {' or '.join(states)}"
    return str(state)


def vcjob_name(job: Any) -> str:
    """The name of the Volcano Job of the job's current run, as the database has it now (each
    run has its own: ``rules.volcano.volcano_job_name``)."""
    from portal.models import Job
    from rules import volcano

    attempt = Job.objects.values_list("attempt_number", flat=True).get(pk=job.pk)
    return volcano.volcano_job_name(str(job.public_id), attempt)


def wait_deleted(
    sim: Any, job: Any, *states: str, namespace: str = "gpupool", timeout: float = PATIENCE
) -> str:
    """Wait for the portal to delete the job's Volcano Job, let the kubelet's grace period pass,
    then wait for one of ``states``.

    The portal deletes in the foreground: the Volcano Job stays, marked for deletion, until its
    pods are gone, and the job keeps its GPUs (CANCELLING, PREEMPTING) until then. On kubesim's
    frozen clock the pods go only when the test lets their termination time pass.
    """
    name = vcjob_name(job)

    def marked_or_gone() -> bool:
        obj = sim.get("jobs", name, namespace)
        return obj is None or bool(obj["metadata"].get("deletionTimestamp"))

    assert wait_for(marked_or_gone, timeout=timeout), f"{name} was never deleted"
    sim.advance(max(1.0, float(sim.config.simulation.pod_termination_seconds)))
    return wait_state(job, *states, timeout=timeout)
