"""The full scheduling cycle (load, decide, persist) over 10,000 queued jobs in PostgreSQL.

Also the cost of one cycle with 5,000 jobs running and a few new ones queued: what each cycle
costs under a stream of submits.

Prints the cycle's time split next to the bare database work it cannot avoid — one bulk read
of the queued rows and one bulk update of their state — measured in the same run, and the
admissions persisted per second. Uses its own database (created and dropped here).

    .venv/bin/python bench/cycle_bench.py [--quick] [--pending N] [--running N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from calibrate import calibration_line  # noqa: E402 - a sibling module, found through sys.path

BENCH_DB = "gpupool_cyclebench"
BASE_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpupool")
SERVER_URL = BASE_URL.rsplit("/", 1)[0]


def recreate_database() -> None:
    import psycopg

    with psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{BENCH_DB}"')


def drop_database() -> None:
    import psycopg

    with psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')


def setup_django() -> None:
    os.environ["DATABASE_URL"] = f"{SERVER_URL}/{BENCH_DB}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("seed_catalog", verbosity=0)


def seed(*, pending: int, teams: int, clusters: int, nodes_per_cluster: int) -> None:
    """Teams with quota on three models, GPU nodes, and ``pending`` queued jobs."""
    import datetime as dt

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from clusters.models import Cluster, Node
    from portal.models import Job, JobState, Team
    from scheduling.models import GpuModel, Quota

    models = [GpuModel.objects.get(key=k) for k in ("t4", "a100-80gb", "h100-sxm")]
    owner = get_user_model().objects.create(username="bench")
    team_rows = Team.objects.bulk_create(
        [Team(name=f"Team {i}", slug=f"team-{i}") for i in range(teams)]
    )
    Quota.objects.bulk_create(
        [Quota(team=t, gpu_model=m, nominal=8) for t in team_rows for m in models]
    )
    now = timezone.now()
    for c in range(clusters):
        cluster = Cluster.objects.create(name=f"c{c}", api_url="https://k8s.bench")
        Node.objects.bulk_create(
            [
                Node(
                    cluster=cluster,
                    name=f"n{i}",
                    gpu_model=models[i % 3],
                    gpu_capacity=8,
                    gpu_allocatable=8,
                    last_seen_at=now,
                )
                for i in range(nodes_per_cluster)
            ]
        )
    jobs = []
    for i in range(pending):
        jobs.append(
            Job(
                team=team_rows[i % teams],
                owner=owner,
                name=f"j{i}",
                image="python:3.11",
                replicas=1 + i % 2,
                gpus_per_replica=(1, 2, 4, 8)[i % 4],
                cpu_millicores=4000,
                memory_mib=16384,
                max_runtime_seconds=3600,
                min_gpu_memory_gib=(0, 16, 40)[i % 3],
                state=JobState.QUEUED,
                state_changed_at=now,
                submitted_at=now - dt.timedelta(seconds=pending - i),
            )
        )
    Job.objects.bulk_create(jobs, batch_size=2000)


def reset() -> None:
    """Put every job back in line so each measured cycle sees the same work."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "UPDATE portal_job SET state = 'QUEUED', cluster_id = NULL, gpu_model_id = NULL, "
            "node_plan = '[]', placement = '{}', admitted_at = NULL"
        )
        cur.execute("DELETE FROM portal_jobwait")
        cur.execute("DELETE FROM portal_jobevent")
        cur.execute("VACUUM ANALYZE portal_job")


def bare_work() -> float:
    """One bulk read of the queued rows and one bulk update of their state (ms)."""
    from django.db import connection, transaction

    from portal.models import Job, JobState

    t0 = time.perf_counter()
    with transaction.atomic():
        rows = list(
            Job.objects.filter(state=JobState.QUEUED).values_list(
                "id", "team_id", "priority", "submitted_at", "gpus_per_replica"
            )
        )
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE portal_job SET state_changed_at = now() WHERE id = ANY(%s)",
                [[r[0] for r in rows]],
            )
    return (time.perf_counter() - t0) * 1e3


def measure(runs: int) -> dict[str, list[float]]:
    from scheduling.cycle import run_cycle

    out: dict[str, list[float]] = {
        "total": [],
        "load": [],
        "decide": [],
        "persist": [],
        "bare": [],
        "admitted": [],
        "next_total": [],
        "next_persist": [],
        "next_admitted": [],
        "next_rewritten": [],
        "next_queued": [],
    }
    for _ in range(runs):
        reset()
        out["bare"].append(bare_work())
        t0 = time.perf_counter()
        result = run_cycle()
        out["total"].append((time.perf_counter() - t0) * 1e3)
        for k in ("load", "decide", "persist"):
            out[k].append(result.timings_ms[k])
        out["admitted"].append(len(result.admitted))
        # The next cycle: what was admitted has run and ended, so as many come in again and
        # everyone behind them moves up; the reasons stay (the steady state of a long queue).
        finish_admitted()
        before = waits_now()
        t0 = time.perf_counter()
        result = run_cycle()
        out["next_total"].append((time.perf_counter() - t0) * 1e3)
        out["next_persist"].append(result.timings_ms["persist"])
        out["next_admitted"].append(len(result.admitted))
        after = waits_now()
        left = [pk for pk in after if pk in before]  # queued before and after
        out["next_queued"].append(len(left))
        out["next_rewritten"].append(sum(1 for pk in left if after[pk] != before[pk]))
    return out


def waits_now() -> dict[int, tuple[object, ...]]:
    """Every queued job's stored wait (outside the timed cycle): what a cycle rewrote is
    what differs between two reads."""
    from portal.models import JobWait

    # Every column, whatever the commit calls them: the same bench compares two commits.
    columns = [f.attname for f in JobWait._meta.concrete_fields if f.attname != "job_id"]
    return {
        row[0]: row[1:]
        for row in JobWait.objects.filter(job__state="QUEUED").values_list("job_id", *columns)
    }


def finish_admitted() -> None:
    """The jobs the last cycle admitted ran and ended: their GPUs and quota come free."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "UPDATE portal_job SET state = 'SUCCEEDED', cluster_id = NULL, gpu_model_id = NULL, "
            "node_plan = '[]' WHERE state = 'ADMITTED'"
        )


def fresh_database() -> None:
    """Drop and recreate the bench database under the already configured Django."""
    from django.core.management import call_command
    from django.db import connections

    connections.close_all()
    recreate_database()
    call_command("migrate", verbosity=0)
    call_command("seed_catalog", verbosity=0)


def running_cycle(*, running: int, queued: int, runs: int) -> tuple[float, float]:
    """(CPU ms of a whole cycle, ms of its load) with ``running`` one-GPU jobs holding GPUs and
    ``queued`` new ones: what every cycle costs under a stream of submits, where the running
    jobs, not the few new ones, are the work."""
    from django.db import connection

    from scheduling.cycle import run_cycle
    from scheduling.models import Quota

    fresh_database()
    seed(pending=running + queued, teams=1, clusters=1, nodes_per_cluster=running // 8 + 30)
    Quota.objects.update(nominal=running + queued)
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE portal_job SET replicas = 1, gpus_per_replica = 1, min_gpu_memory_gib = 0"
        )
    while run_cycle().admitted:  # admit them all (the lookback takes 1,000 a cycle)
        pass
    with connection.cursor() as cur:
        cur.execute("UPDATE portal_job SET state = 'RUNNING' WHERE id <= %s", [running])
    cpu, load = [], []
    for _ in range(runs + 1):  # the first warms caches and plans
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE portal_job SET state = 'QUEUED', cluster_id = NULL, gpu_model_id = NULL, "
                "node_plan = '[]' WHERE id > %s",
                [running],
            )
        c0 = time.process_time()
        result = run_cycle()
        cpu.append((time.process_time() - c0) * 1e3)
        load.append(result.timings_ms["load"])
    return statistics.median(cpu[1:]), statistics.median(load[1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=5_000, help="jobs holding GPUs")
    args = parser.parse_args()
    pending = 2_000 if args.quick else args.pending
    runs = 3 if args.quick else 7
    recreate_database()
    try:
        setup_django()
        seed(pending=pending, teams=50, clusters=5, nodes_per_cluster=60)
        measure(1)  # warm caches and plans
        m = measure(runs)
        running = 1_000 if args.quick else args.running
        busy_cpu, busy_load = running_cycle(running=running, queued=16, runs=runs)
    finally:
        from django.db import connections

        connections.close_all()
        drop_database()
    med = {k: statistics.median(v) for k, v in m.items()}
    admitted = med["admitted"]
    print(f"cycle over {pending:,} queued jobs, 50 teams, 5 clusters x 60 nodes (median of {runs})")
    print(f"  {calibration_line()}")
    print(f"  load      {med['load']:8.1f} ms")
    print(f"  decide    {med['decide']:8.1f} ms")
    print(
        f"  persist   {med['persist']:8.1f} ms   ({admitted:.0f} admissions, "
        f"{admitted / (med['persist'] / 1e3):,.0f} admissions/s persisted)"
    )
    print(f"  total     {med['total']:8.1f} ms   (goal < 250 ms at 10,000)")
    print(f"  bare DB   {med['bare']:8.1f} ms   (one bulk read + one bulk update of those rows)")
    print(f"  ratio     {med['total'] / med['bare']:8.2f} x  (goal <= 3x)")
    print(
        f"  next cycle {med['next_total']:7.1f} ms   (persist {med['next_persist']:.1f} ms; "
        f"{med['next_admitted']:.0f} admitted as the last ones ended, everyone else moved up)"
    )
    print(
        f"  next cycle rewrote {med['next_rewritten']:,.0f} of the {med['next_queued']:,.0f} "
        "waits left queued (rows whose stored reason, place or notes changed)"
    )
    print(f"cycle with {running:,} running jobs and 16 queued (median of {runs})")
    print(f"  CPU       {busy_cpu:8.1f} ms   (load {busy_load:.1f} ms wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
