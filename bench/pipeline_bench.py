"""End to end: REST submit -> scheduling cycle -> dispatch -> Volcano Job created on kubesim.

Everything runs as in production, on this machine, in processes of its own: gunicorn serving
the portal, two ``celery -A config worker`` processes (thread pools) that run the scheduling
cycles the submits trigger and the dispatch tasks the cycles hand over, and kubesim (HTTPS,
its own CA, its simulation running) as the cluster. Nothing is shortcut: jobs enter through
``POST /api/v1/jobs/batch/`` (or ``POST /api/v1/jobs/`` with ``--batch 1``) with free quota
and free GPUs, the cycle admits them, the dispatch creates their Volcano Jobs.

An open-loop client submits ``--jobs`` jobs (default 5,000) at ``--arrival`` jobs/s (default
320) in requests of ``--batch`` jobs. A job's latency runs from the moment its request was due
to be sent (so a server that falls behind cannot hide it by slowing the client down) to the
moment the worker recorded its Volcano Job as created; a job counts as created only when kubesim
holds its Volcano Job (listed back with the official client at the end), and the jobs left
behind are printed with their state and fail the goal line. Printed: sustained jobs/s (all jobs
over the time from the first request to the last create), p50/p90/p99/max latency, and the CPU
seconds each part used per job, so a change can be judged on a busy machine too. Then its floor,
measured in the same run: the same Volcano Jobs created straight through the official client
from as many threads as the workers have, with no portal at all, and the pipeline's ratios to it
(jobs/s, and the portal's CPU per job against the client's per bare create).

Why batches by default: on this 2-core machine one ``POST /api/v1/jobs/`` costs several ms of
gunicorn CPU (DRF, auth, throttle, validation; ``bench/submit_bench.py`` prints it), so single
submits alone top out near 200/s here however fast the rest is; a client with many jobs (a
sweep, a pipeline) uses the batch endpoint. ``--batch 1`` prints the single-submit figure.

    .venv/bin/python bench/pipeline_bench.py [--quick] [--jobs N] [--arrival JOBS_PER_S]
        [--batch N] [--workers 2] [--concurrency 4] [--rate 2000]

``--rate`` is the cluster's request budget (requests/s, a per-cluster setting). The default
for a real Volcano controller is 50/s, which would simply be the result; the benchmark raises
it to see what the portal itself can do.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH_DIR))

import dispatch_bench  # noqa: E402 - a sibling script, found through sys.path
import submit_bench  # noqa: E402
from calibrate import calibration_line  # noqa: E402

BENCH_DB = "gpupool_pipelinebench"
BASE_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpupool")
SERVER_URL = BASE_URL.rsplit("/", 1)[0]
# A Redis database of the bench's own (broker and cache); emptied before and after.
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
NODES = 700  # 5,600 A100s: every job of the default run finds a free GPU
GOAL_JOBS_PER_S, GOAL_P50_S, GOAL_P99_S = 300.0, 1.0, 3.0

KUBESIM_CONFIG = f"""\
name: pipeline
simulation: {{podStartupSeconds: 2, defaultDurationSeconds: 86400, historySize: 100000,
             maxEvents: 2000}}
namespaces: [gpupool]
nodePools:
  - {{name: a100, count: {NODES}, gpuModel: a100-80gb, gpus: 8, cpu: 128, memory: 1Ti}}
"""


def job_body(serial: int) -> dict[str, Any]:
    return {
        "team": "bench",
        "name": f"sweep-{serial}",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["python", "train.py", f"--seed={serial}"],
        "replicas": 1,
        "gpus_per_replica": 1,
        "min_gpu_memory_gib": 40,
    }


def bench_env(var_dir: str) -> dict[str, str]:
    """The environment of this process, gunicorn and the workers (one database, one broker)."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": f"{SERVER_URL}/{BENCH_DB}",
        "CELERY_BROKER_URL": REDIS_URL,
        "CACHE_URL": REDIS_URL,
        "CACHE_KEY_PREFIX": "pipeline-bench",
        "GPUPOOL_CLUSTERS_QUEUE": "",
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "GPUPOOL_SECRET_KEYS": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        "GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS": "true",
        # The client plays the TLS-terminating proxy in front of a DEBUG=false portal (its
        # requests say X-Forwarded-Proto: https): gunicorn and Django believe that only from
        # a listed proxy (gunicorn.conf.py, portal/proxies.py).
        "GPUPOOL_TRUSTED_PROXIES": "127.0.0.1",
        "SUBMIT_THROTTLE_RATE": "1000000/s",
        # A backlog of one team's 5,000 jobs may pass the default queue limits (5,000 a team,
        # 1,000 a member): switched off, so a run measures the pipeline, never a 429.
        "GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM": "0",
        "GPUPOOL_MAX_QUEUED_JOBS_PER_USER": "0",
        "GPUPOOL_VAR_DIR": var_dir,
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }


def flush_redis() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    client.close()


def seed(kubeconfig: Path, *, clients: int, gpus: int, rate: int) -> list[str]:
    """Catalog, team, members with API tokens, quota for every job, the registered cluster."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from clusters.inventory import inventory_sync
    from clusters.queues import queues_sync
    from clusters.registration import cluster_credentials_from_input, cluster_register
    from portal.models import Membership, Role, Team
    from portal.tokens import api_token_create
    from scheduling.models import GpuModel, Quota

    call_command("migrate", interactive=False, verbosity=0)
    call_command("seed_catalog", verbosity=0)
    team = Team.objects.create(name="Bench", slug="bench")
    Quota.objects.create(team=team, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=gpus)
    tokens = []
    for i in range(clients):
        user = get_user_model().objects.create_user(f"bench{i:02d}", password=None)
        Membership.objects.create(user=user, team=team, role=Role.MEMBER)
        tokens.append(api_token_create(user=user, name="bench")[1])
    credentials = cluster_credentials_from_input(kubeconfig=kubeconfig.read_bytes())
    cluster, _ = cluster_register(
        name="pipeline", credentials=credentials, namespace="gpupool", request_rate=rate,
        creates_in_flight=64,
    )  # fmt: skip
    assert inventory_sync(cluster=cluster).ok
    assert queues_sync(cluster=cluster).ok
    return tokens


# ---------------------------------------------------------------------------------------------
# The open-loop client
# ---------------------------------------------------------------------------------------------
@dataclass
class Sent:
    """When each job's request was due, by the job's public id; what went wrong."""

    due: dict[str, float] = field(default_factory=dict)
    errors: int = 0
    first_error: str = ""
    began: float = 0.0
    ended: float = 0.0


async def _submit_all(
    port: int, tokens: list[str], *, jobs: int, batch: int, arrival: float
) -> Sent:
    """Send request k at ``began + k * batch / arrival`` on whichever connection is free."""
    sent = Sent()
    path, many = ("/api/v1/jobs/batch/", True) if batch > 1 else ("/api/v1/jobs/", False)
    requests = []
    for k in range(0, jobs, batch):
        bodies = [job_body(i) for i in range(k, min(k + batch, jobs))]
        payload = json.dumps({"jobs": bodies} if many else bodies[0]).encode()
        requests.append((len(bodies), payload))
    queue: asyncio.Queue[tuple[float, int, bytes]] = asyncio.Queue()
    sent.began = time.time() + 0.2
    for k, (count, payload) in enumerate(requests):
        queue.put_nowait((sent.began + k * batch / arrival, count, payload))

    async def connection(token: str) -> None:
        reader, writer = await asyncio.open_connection(submit_bench.HOST, port)
        try:
            while not queue.empty():
                due, count, payload = queue.get_nowait()
                await asyncio.sleep(max(0.0, due - time.time()))
                writer.write(
                    submit_bench.http_request("POST", path, port=port, token=token, body=payload)
                )
                status, body, _ = await submit_bench._read_response(reader)
                if status != 201:
                    sent.errors += count
                    sent.first_error = sent.first_error or f"{status}: {body[:300]!r}"
                    continue
                data = json.loads(body)
                for job in data["jobs"] if many else [data]:
                    sent.due[job["id"]] = due
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    await asyncio.gather(*(connection(t) for t in tokens))
    sent.ended = time.time()
    return sent


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------
class Cpu:
    """CPU seconds of the bench's processes by part (from /proc; PostgreSQL by database)."""

    def __init__(self, parts: dict[str, list[int]]) -> None:
        self.parts = parts

    def _pids(self) -> dict[int, str]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [BENCH_DB],
            )
            out = {pid: "postgres" for (pid,) in cursor.fetchall()}
        roots = {pid: part for part, pids in self.parts.items() for pid in pids}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
                if parent in roots:
                    out[int(stat.parent.name)] = roots[parent]
        return {**out, **roots}

    def sample(self) -> dict[int, tuple[str, float]]:
        ticks = os.sysconf("SC_CLK_TCK")
        out = {}
        for pid, part in self._pids().items():
            with contextlib.suppress(OSError, IndexError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[pid] = (part, (int(fields[11]) + int(fields[12])) / ticks)
        return out


def cpu_used(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict:
    used: dict[str, float] = {}
    for pid, (part, seconds) in after.items():
        used[part] = used.get(part, 0.0) + seconds - before.get(pid, (part, 0.0))[1]
    return used


def wait_for_creates(public_ids: list[str], timeout: float, cpu: Cpu) -> dict[int, tuple]:
    """Poll (cheaply) until no job is left before SUBMITTED; sample CPU while it runs."""
    from portal.models import Job, JobState

    deadline = time.time() + timeout
    samples = {}
    while time.time() < deadline:
        samples.update(cpu.sample())  # keep the last figure of processes that end meanwhile
        left = Job.objects.filter(
            state__in=[JobState.QUEUED, JobState.ADMITTED], public_id__in=public_ids
        ).count()
        if not left:
            break
        time.sleep(0.5)
    samples.update(cpu.sample())
    return samples


def pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def volcano_jobs_on_cluster(kubeconfig: Path) -> set[str]:
    """The names of the Volcano Jobs kubesim holds, read back with the official client: a job
    counts as created when its object exists on the cluster, not when a row says so."""
    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(config_file=str(kubeconfig)))
    data = api.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "gpupool", "jobs")
    return {item["metadata"]["name"] for item in data.get("items") or []}


def created_at(by_pk: dict[int, str], on_cluster: set[str]) -> dict[int, Any]:
    """When the dispatch recorded each job's Volcano Job (its event into SUBMITTED: the
    submit's own event is also named "Submitted", but goes into QUEUED), for the jobs whose
    object kubesim really holds."""
    from portal.models import Job, JobEvent, JobState

    named = dict(Job.objects.filter(pk__in=list(by_pk)).values_list("pk", "volcano_job_name"))
    events = (
        JobEvent.objects.filter(job_id__in=list(by_pk), to_state=JobState.SUBMITTED)
        .values_list("job_id", "created_at")
        .order_by("created_at")
    )
    return {pk: at for pk, at in events if named.get(pk) in on_cluster}


def print_stuck(by_pk: dict[int, str], created: dict[int, Any], on_cluster: set[str]) -> None:
    """The jobs left behind: their state, and whether a Volcano Job exists for them."""
    from portal.models import Job

    left = Job.objects.filter(pk__in=[pk for pk in by_pk if pk not in created])
    rows = list(left.values_list("public_id", "state", "volcano_job_name", "state_changed_at"))
    if not rows:
        return
    print(f"  STUCK: {len(rows)} jobs without a Volcano Job on the cluster:")
    for public_id, state, name, changed in rows[:10]:
        there = "object exists" if name and name in on_cluster else "no object"
        print(f"    {public_id} {state} since {changed:%H:%M:%S} ({there})")
    if len(rows) > 10:
        print(f"    … and {len(rows) - 10} more")


@dataclass
class Floor:
    """The bare cost of the pipeline's result: the same Volcano Jobs created straight through
    the official client, measured in the same run."""

    creates: int
    per_s: float
    client_ms: float
    kubesim_ms: float


def bare_creates(kubeconfig: Path, *, count: int, threads: int, kubesim_pid: int) -> Floor:
    """Create ``count`` copies of the spec of a Volcano Job the pipeline created, under new
    names, from ``threads`` threads of this process: what the pipeline's result costs with no
    portal at all. The CPU per create is this process's (the client) and kubesim's."""
    import copy
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(config_file=str(kubeconfig)))
    group, version, namespace, plural = "batch.volcano.sh", "v1alpha1", "gpupool", "jobs"
    listed = api.list_namespaced_custom_object(group, version, namespace, plural, limit=1)
    template = listed["items"][0]
    template.pop("status", None)
    template["metadata"] = {}  # no labels: nothing of the portal's watches these
    bodies = []
    for i in range(count):
        body = copy.deepcopy(template)
        body["metadata"]["name"] = f"floor-{i}"
        bodies.append(body)
    cpu = Cpu({"kubesim": [kubesim_pid]})
    before, c0, t0 = cpu.sample(), time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(
            pool.map(
                lambda b: api.create_namespaced_custom_object(group, version, namespace, plural, b),
                bodies,
            )
        )
    wall, client_s = time.perf_counter() - t0, time.process_time() - c0
    kubesim_s = cpu_used(before, cpu.sample()).get("kubesim", 0.0)
    return Floor(count, count / wall, client_s * 1e3 / count, kubesim_s * 1e3 / count)


def print_floor(floor: Floor, rate: float, portal_ms: float) -> None:
    print(
        f"  floor: {floor.creates:,} bare creates of the same Volcano Job through the official "
        f"client: {floor.per_s:,.0f}/s, CPU ms per create: client {floor.client_ms:.2f}   "
        f"kubesim {floor.kubesim_ms:.2f}"
    )
    print(
        f"  pipeline / floor: jobs/s {rate / floor.per_s:.2f}; portal CPU per job (gunicorn, "
        f"workers, postgres) {portal_ms:.2f} ms = {portal_ms / floor.client_ms:.1f} x the "
        "client's per bare create"
    )


def report(
    args: argparse.Namespace, sent: Sent, used: dict[str, float], kubeconfig: Path
) -> tuple[bool, float, float]:
    """Print the run's figures; (every job created, jobs/s, portal CPU ms per job)."""
    from django.db.models import Count

    from portal.models import Job

    ids = dict(Job.objects.filter(public_id__in=list(sent.due)).values_list("public_id", "pk"))
    by_pk = {pk: str(public_id) for public_id, pk in ids.items()}
    on_cluster = volcano_jobs_on_cluster(kubeconfig)
    created = created_at(by_pk, on_cluster)
    states = dict(
        Job.objects.filter(pk__in=list(by_pk))
        .values("state")
        .annotate(n=Count("id"))
        .values_list("state", "n")
    )
    latencies = sorted(at.timestamp() - sent.due[by_pk[pk]] for pk, at in created.items())
    count = len(sent.due) + sent.errors
    shape = "POST /api/v1/jobs/" if args.batch == 1 else f"batches of {args.batch}"
    print(
        f"pipeline: {count} jobs at {args.arrival:g}/s ({shape}) -> cycle -> dispatch -> "
        f"Volcano Jobs on kubesim; gunicorn {args.gunicorn} x {args.threads} threads, "
        f"{args.workers} Celery workers x {args.concurrency} threads, cluster budget {args.rate}/s"
    )
    if sent.errors:
        print(f"  WARNING: {sent.errors} jobs refused at submit, first: {sent.first_error}")
    print(f"  submitted in {sent.ended - sent.began:.2f} s; states afterwards: {states}")
    print(f"  Volcano Jobs read back from the cluster: {len(on_cluster)}")
    print_stuck(by_pk, created, on_cluster)
    print(f"  {calibration_line()}")
    if not latencies:
        print("  no job reached its Volcano Job")
        return False, 0.0, 0.0
    finish = max(at.timestamp() for at in created.values())
    elapsed = finish - sent.began
    rate = len(latencies) / elapsed
    p50, p99 = pct(latencies, 50), pct(latencies, 99)
    print(f"  sustained: {rate:8.1f} jobs/s   ({len(latencies)} created in {elapsed:.2f} s)")
    print(
        f"  latency submit -> Volcano Job created: p50 {p50 * 1e3:6.0f} ms   "
        f"p90 {pct(latencies, 90) * 1e3:6.0f} ms   p99 {p99 * 1e3:6.0f} ms   "
        f"max {latencies[-1] * 1e3:6.0f} ms   mean {statistics.mean(latencies) * 1e3:.0f} ms"
    )
    parts = ["gunicorn", "workers", "kubesim", "postgres"]
    total = sum(used.get(p, 0.0) for p in parts)
    print(
        "  CPU ms per job: "
        + "   ".join(f"{p} {used.get(p, 0.0) * 1e3 / len(latencies):.2f}" for p in parts)
        + f"   all {total * 1e3 / len(latencies):.2f}  (2 cores = {2e3 / rate:.2f} ms/job at "
        f"this rate)"
    )
    ok = rate >= GOAL_JOBS_PER_S and p50 < GOAL_P50_S and p99 < GOAL_P99_S
    ok = ok and len(latencies) == count
    print(
        f"  goal >= {GOAL_JOBS_PER_S:.0f} jobs/s, p50 < {GOAL_P50_S:.0f} s, "
        f"p99 < {GOAL_P99_S:.0f} s, every job created: {'ok' if ok else 'MISSED'}"
    )
    portal = sum(used.get(p, 0.0) for p in ("gunicorn", "workers", "postgres"))
    return len(latencies) == count, rate, portal * 1e3 / len(latencies)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="600 jobs, a smoke run")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--arrival", type=float, default=320.0, help="jobs/s offered")
    parser.add_argument("--batch", type=int, default=16, help="jobs per request (1: single)")
    parser.add_argument("--clients", type=int, default=4, help="client connections")
    parser.add_argument("--gunicorn", type=int, default=1, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--concurrency", type=int, default=4, help="threads per worker")
    parser.add_argument("--rate", type=int, default=2000, help="cluster request budget (/s)")
    args = parser.parse_args()
    jobs = 600 if args.quick else args.jobs

    dispatch_bench.recreate_database(BENCH_DB)
    flush_redis()
    procs: list[Any] = []
    ok = False
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        env = bench_env(str(tmp / "var"))
        os.environ.update(env)
        try:
            kubesim, kubeconfig = dispatch_bench.start_kubesim(tmp, KUBESIM_CONFIG)
            procs.append(kubesim)
            tokens = seed(kubeconfig, clients=args.clients, gpus=NODES * 8, rate=args.rate)
            log = tmp / "gunicorn.log"
            with submit_bench.gunicorn(
                env, workers=args.gunicorn, threads=args.threads, log_path=log
            ) as (port, server):
                submit_bench.wait_until_serving(port, tokens[0], server, log)
                workers = dispatch_bench.start_workers(
                    args.workers, args.concurrency, tmp, queues="celery", env=env
                )
                procs.extend(workers)
                cpu = Cpu(
                    {
                        "gunicorn": [server.pid],
                        "workers": [w.pid for w in workers],
                        "kubesim": [kubesim.pid],
                    }
                )
                before = cpu.sample()
                sent = asyncio.run(
                    _submit_all(port, tokens, jobs=jobs, batch=args.batch, arrival=args.arrival)
                )
                after = wait_for_creates(list(sent.due), max(120.0, jobs / 20), cpu)
                ok, rate, portal_ms = report(args, sent, cpu_used(before, after), kubeconfig)
                if rate:
                    floor = bare_creates(
                        kubeconfig,
                        count=min(jobs, 2000),
                        threads=args.workers * args.concurrency,
                        kubesim_pid=kubesim.pid,
                    )
                    print_floor(floor, rate, portal_ms)
        finally:
            dispatch_bench.stop(procs)
            flush_redis()
            from django.db import connections

            connections.close_all()
            dispatch_bench.drop_database(BENCH_DB)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
