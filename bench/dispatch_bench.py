"""Dispatch throughput: admitted jobs to Volcano Jobs on kubesim, through Celery workers.

Seeds N admitted jobs (default 5,000) in a database of its own, starts kubesim (HTTPS, its own
CA) and two ``celery -A config worker`` processes, hands every job to the clusters app the way
the scheduling cycle does (``portal.hooks.admitted``, on commit), and waits until every job is
SUBMITTED, i.e. its Volcano Job exists on kubesim. Prints the sustained rate and the latency
from admission to the create being recorded (p50, p90, p99, max).

This measures from ADMITTED, not from the REST submit: the scheduling cycle's own cost is
``bench/cycle_bench.py``'s, and the submit path's ``bench/submit_bench.py``'s.

    .venv/bin/python bench/dispatch_bench.py [--quick] [--jobs N] [--workers 2]
        [--concurrency 4] [--rate 2000] [--arrival JOBS_PER_S]

``--rate`` is the cluster's request budget (requests/s). The portal's default for a real
Volcano controller is 50/s, which would simply be the result here; the benchmark raises it
to see what the dispatcher itself can do, and prints the default's bound beside it.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BENCH_DB = "gpupool_dispatchbench"
BASE_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpupool")
SERVER_URL = BASE_URL.rsplit("/", 1)[0]
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/10")
KEYS = "ni275Kw9zX1dblvT2Xssxo5jL-qfVcGwPYyKlRJ3Lho="
QUEUE = f"gpupool-dispatch-bench-{os.getpid()}"

KUBESIM_CONFIG = """\
name: bench
simulation: {podStartupSeconds: 2, defaultDurationSeconds: 86400, historySize: 100000,
             maxEvents: 2000}
namespaces: [gpupool]
nodePools:
  - {name: a100, count: 16, gpuModel: a100-80gb, gpus: 8, cpu: 128, memory: 1Ti}
"""


def recreate_database(name: str = BENCH_DB) -> None:
    import psycopg

    with psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str = BENCH_DB) -> None:
    import psycopg

    with psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def worker_env() -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": f"{SERVER_URL}/{BENCH_DB}",
        "CELERY_BROKER_URL": REDIS_URL,
        "GPUPOOL_CLUSTERS_QUEUE": QUEUE,
        "GPUPOOL_SECRET_KEYS": KEYS,
        "GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS": "true",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }


def setup_django() -> None:
    os.environ.update(worker_env())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("seed_catalog", verbosity=0)


def start_kubesim(
    tmp: Path, cluster_config: str = KUBESIM_CONFIG
) -> tuple[subprocess.Popen[bytes], Path]:
    config, kubeconfig = tmp / "kubesim.yaml", tmp / "kubeconfig.yaml"
    config.write_text(cluster_config)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubesim", "--config", str(config), "--kubeconfig",
         str(kubeconfig), "--clock-speed", "1"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not kubeconfig.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("kubesim did not start")
        time.sleep(0.1)
    time.sleep(0.3)
    return proc, kubeconfig


def start_workers(
    count: int,
    concurrency: int,
    log_dir: Path,
    *,
    queues: str = QUEUE,
    env: dict[str, str] | None = None,
) -> list[subprocess.Popen[bytes]]:
    """``count`` Celery worker processes (thread pools) on ``queues``, once all answer a ping."""
    procs = []
    for i in range(count):
        log = (log_dir / f"worker{i}.log").open("wb")
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "config",
                    "worker",
                    "-Q",
                    queues,
                    "-P",
                    "threads",
                    "-c",
                    str(concurrency),
                    "-l",
                    "WARNING",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "-n",
                    f"bench{i}-{QUEUE}@%h",
                ],
                cwd=ROOT,
                env=env or worker_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    from config.celery import app

    names = {f"bench{i}-{QUEUE}@{socket.gethostname()}" for i in range(count)}
    deadline = time.monotonic() + 60
    while True:  # the latency clock must not include the workers' start-up
        replies = app.control.ping(timeout=0.5)
        if names <= {name for reply in replies for name in reply}:
            return procs
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError(f"the workers did not start; see {log_dir}")


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def register(kubeconfig: Path, rate: int) -> object:
    from clusters.inventory import inventory_sync
    from clusters.queues import TeamQueue, queues_sync
    from clusters.registration import cluster_credentials_from_input, cluster_register

    credentials = cluster_credentials_from_input(kubeconfig=kubeconfig.read_bytes())
    cluster, _ = cluster_register(
        name="bench", credentials=credentials, namespace="gpupool", request_rate=rate,
        creates_in_flight=64,
    )  # fmt: skip
    assert inventory_sync(cluster=cluster).ok
    queues_sync(cluster=cluster, desired=[TeamQueue("bench", 100, {"nvidia.com/gpu": 16})])
    return cluster


def seed_admitted(cluster: object, count: int, prefix: int = 0) -> list[int]:
    """``count`` jobs, QUEUED then ADMITTED in one bulk compare-and-set (as the cycle does)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from portal.jobs.state import Change, jobs_transition_bulk
    from portal.models import Job, JobState, Team
    from scheduling.models import GpuModel

    owner, _ = get_user_model().objects.get_or_create(username="bench")
    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    model = GpuModel.objects.get(key="a100-80gb")
    now = timezone.now()
    jobs = Job.objects.bulk_create(
        [
            Job(
                team=team, owner=owner, name=f"j{prefix + i}", image="python:3.11",
                command=["sh", "-c", "sleep 3600"], cpu_millicores=4000, memory_mib=16384,
                max_runtime_seconds=7200, state=JobState.QUEUED, state_changed_at=now,
                submitted_at=now,
            )
            for i in range(count)
        ],
        batch_size=2000,
    )  # fmt: skip
    ids = [j.pk for j in jobs]
    changes = [
        Change(
            job_id=pk,
            updates={"cluster_id": cluster.pk, "gpu_model_id": model.pk,  # type: ignore[attr-defined]
                     "node_plan": [f"a100-{i % 16:02d}"]},
        )
        for i, pk in enumerate(ids)
    ]  # fmt: skip
    won = jobs_transition_bulk(
        changes=changes, expected=JobState.QUEUED, to=JobState.ADMITTED, reason="Admitted"
    )
    assert len(won) == count
    return ids


def admit_waves(cluster: object, count: int, arrival: float) -> tuple[list[int], float]:
    """Admit ``count`` jobs at ``arrival`` jobs/s in waves of 0.2 s (a cycle every 200 ms),
    handing each wave over as it is admitted; returns the ids and the start time."""
    from portal import hooks

    per_wave = max(1, round(arrival * 0.2))
    ids: list[int] = []
    started = time.time()
    while len(ids) < count:
        wave_at = started + len(ids) / arrival
        time.sleep(max(0.0, wave_at - time.time()))
        wave = seed_admitted(cluster, min(per_wave, count - len(ids)), prefix=len(ids))
        for hook in hooks.admitted.listeners:
            hook(wave)
        ids.extend(wave)
    return ids, started


def measure(
    ids: list[int], timeout: float, started: float | None = None
) -> tuple[float, float, list[float]]:
    from django.db import transaction

    from portal import hooks
    from portal.models import Job, JobEvent, JobState

    if started is None:
        started = time.time()
        with transaction.atomic():  # the hook runs on commit, as after a real cycle
            for hook in hooks.admitted.listeners:
                transaction.on_commit(lambda h=hook: h(ids))
    enqueued = time.time()
    deadline = started + timeout
    while time.time() < deadline:
        left = Job.objects.filter(pk__in=ids, state=JobState.ADMITTED).count()
        if left == 0:
            break
        time.sleep(0.25)
    admitted = dict(Job.objects.filter(pk__in=ids).values_list("pk", "admitted_at"))
    submitted = dict(
        JobEvent.objects.filter(job_id__in=ids, reason__in=["Submitted", "Adopted"]).values_list(
            "job_id", "created_at"
        )
    )
    finish = max(t.timestamp() for t in submitted.values()) if submitted else time.time()
    latencies = sorted(
        (submitted[pk] - admitted[pk]).total_seconds() for pk in ids if pk in submitted
    )
    failed = Job.objects.filter(pk__in=ids).exclude(state=JobState.SUBMITTED).count()
    if failed:
        print(f"  WARNING: {failed} jobs did not reach SUBMITTED")
    print(f"  enqueue of {len(ids)} dispatch messages: {enqueued - started:.2f} s")
    offsets = sorted(t.timestamp() - started for t in submitted.values())
    first_admitted = min(a.timestamp() for a in admitted.values())
    print(
        f"  admitted {started - first_admitted:.2f} s before the hand-over; first create "
        f"recorded after {offsets[0]:.2f} s, half after {offsets[len(offsets) // 2]:.2f} s"
    )
    return started, finish, latencies


def pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 jobs, a smoke run")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--concurrency", type=int, default=4, help="threads per worker")
    parser.add_argument("--rate", type=int, default=2000, help="cluster request budget (/s)")
    parser.add_argument(
        "--arrival", type=float, default=0.0,
        help="admit at this many jobs/s in 200 ms waves (default: all at once, a burst)",
    )  # fmt: skip
    args = parser.parse_args()
    count = 300 if args.quick else args.jobs

    recreate_database()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="dispatch-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        try:
            setup_django()
            kubesim, kubeconfig = start_kubesim(tmp)
            procs.append(kubesim)
            cluster = register(kubeconfig, args.rate)
            procs.extend(start_workers(args.workers, args.concurrency, tmp))
            if args.arrival:
                ids, began = admit_waves(cluster, count, args.arrival)
                started, finish, latencies = measure(ids, max(120.0, count / 10), began)
            else:
                ids = seed_admitted(cluster, count)  # admitted_at = now: the clock starts
                started, finish, latencies = measure(ids, timeout=max(120.0, count / 10))
            on_cluster = _count_volcano_jobs(cluster)
        finally:
            stop(procs)
            _drop_queue()
            from django.db import connections

            connections.close_all()
            drop_database()
    elapsed = max(finish - started, 1e-9)
    shape = f"arriving at {args.arrival:g}/s" if args.arrival else "admitted at once"
    print(f"dispatch: {count} jobs {shape} -> Volcano Jobs on kubesim, {args.workers} worker "
          f"processes x {args.concurrency} threads, request budget {args.rate}/s")  # fmt: skip
    print(f"  Volcano Jobs on the cluster afterwards: {on_cluster}")
    print(f"  sustained: {len(latencies) / elapsed:8.1f} jobs/s   ({elapsed:.2f} s in all)")
    if latencies:
        print(
            f"  latency admitted -> created: p50 {pct(latencies, 50) * 1e3:7.0f} ms   "
            f"p90 {pct(latencies, 90) * 1e3:7.0f} ms   p99 {pct(latencies, 99) * 1e3:7.0f} ms   "
            f"max {latencies[-1] * 1e3:7.0f} ms   mean {statistics.mean(latencies) * 1e3:.0f} ms"
        )
    print("  with the default budget (GPUPOOL_CLUSTER_REQUEST_RATE=50) a cluster takes at most "
          "~50 creates/s, whatever the workers can do")  # fmt: skip
    return 0 if len(latencies) == count else 1


def _drop_queue() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    client.delete(QUEUE, f"_kombu.binding.{QUEUE}", f"_kombu.binding_permanent.{QUEUE}")
    client.close()


def _count_volcano_jobs(cluster: object) -> int:
    from clusters.clients import cluster_client

    client = cluster_client(cluster)  # type: ignore[arg-type]
    items, _ = client.list_jobs_with_version(label_selector="app.kubernetes.io/managed-by=gpupool")
    return len(items)


if __name__ == "__main__":
    sys.exit(main())
