"""Small in-process figures behind the core path's design choices, each one rerunnable.

The gunicorn and pipeline benches swing by a third on a shared VM; these measure one step in
one process, alternating the two ways of doing it, so a choice made on them can be checked:

* ``ids``: sending 9,000 job ids to PostgreSQL as a Python list (psycopg adapts each element)
  or as one array literal (``portal.db.int_array``), client CPU per statement;
* ``waits``: the cycle's write of 9,000 queued jobs' waits (``portal.jobs.waits.waits_write``),
  first (all inserted) and again (all updated in place), client CPU and wall time;
* ``submit``: one ``POST /api/v1/jobs/`` in process (Django's test client, token auth, the
  whole middleware stack), CPU per submit and Python function calls per submit;
* ``decide``: the engine on ``bench/engine_bench.py``'s pool with its 5,000 pending jobs, CPU
  per decide (median and minimum) and Python function calls per decide. It reaches the
  engine through ``engine_bench``'s own imports, so this script measures an older tree too
  when copied into it.

Uses its own database (created and dropped here).

    .venv/bin/python bench/micro_bench.py [--quick] [--rows N]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from calibrate import calibration_line  # noqa: E402 - a sibling module, found through sys.path

BENCH_DB = "gpupool_microbench"
BASE_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpupool")
SERVER_URL = BASE_URL.rsplit("/", 1)[0]


def _database(action: str) -> None:
    import psycopg

    with psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        if action == "create":
            conn.execute(f'CREATE DATABASE "{BENCH_DB}"')


def setup_django() -> None:
    os.environ["DATABASE_URL"] = f"{SERVER_URL}/{BENCH_DB}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("seed_catalog", verbosity=0)


def cpu_ms(step: Callable[[], object], runs: int) -> list[float]:
    """Process CPU of each of ``runs`` calls of ``step``, in ms."""
    out = []
    for _ in range(runs):
        start = time.process_time()
        step()
        out.append((time.process_time() - start) * 1000)
    return out


def ids_figures(rows: int, runs: int) -> None:
    from django.db import connection

    from portal import db

    ids = list(range(1, rows + 1))

    def as_list() -> None:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM unnest(%s::bigint[])", [ids])

    def as_literal() -> None:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM unnest(%s::bigint[])", [db.int_array(ids)])

    listed, literal = [], []
    for _ in range(runs):  # alternating, so drift falls on both alike
        listed += cpu_ms(as_list, 1)
        literal += cpu_ms(as_literal, 1)
    print(
        f"ids: {rows:,} ids as a Python list {statistics.median(listed):.2f} ms client CPU, "
        f"as one array literal {statistics.median(literal):.2f} ms (median of {runs})"
    )


def seed_queued(rows: int) -> list[int]:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from portal.models import Job, JobState, Team

    owner = get_user_model().objects.create(username="micro")
    team = Team.objects.create(name="Micro", slug="micro")
    now = timezone.now()
    jobs = Job.objects.bulk_create(
        [
            Job(
                team=team,
                owner=owner,
                name=f"j{i}",
                image="python:3.11",
                cpu_millicores=4000,
                memory_mib=16384,
                max_runtime_seconds=3600,
                state=JobState.QUEUED,
                state_changed_at=now,
                submitted_at=now,
            )
            for i in range(rows)
        ],
        batch_size=2000,
    )
    return [j.pk for j in jobs]


def waits_figures(ids: list[int], runs: int) -> None:
    from portal.jobs.waits import WaitRow, waits_clear, waits_write

    def rows(shift: int) -> list[WaitRow]:
        return [
            WaitRow(pk, "QUOTA", f"needs {1 + (i + shift) % 4} more GPUs", i + shift, None, "t4")
            for i, pk in enumerate(ids)
        ]

    first_cpu, first_wall, again_cpu, again_wall = [], [], [], []
    for run in range(runs):
        waits_clear(ids)
        batch = rows(run)
        wall = time.perf_counter()
        first_cpu += cpu_ms(lambda b=batch: waits_write(b), 1)
        first_wall.append((time.perf_counter() - wall) * 1000)
        batch = rows(run + 1)  # every position moves, as behind an admission
        wall = time.perf_counter()
        again_cpu += cpu_ms(lambda b=batch: waits_write(b), 1)
        again_wall.append((time.perf_counter() - wall) * 1000)
    med = statistics.median
    print(
        f"waits: {len(ids):,} rows inserted {med(first_cpu):.1f} ms client CPU / "
        f"{med(first_wall):.1f} ms wall; rewritten in place {med(again_cpu):.1f} ms / "
        f"{med(again_wall):.1f} ms (median of {runs})"
    )


def submit_figures(runs: int) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from portal.models import Membership, Team
    from portal.tokens import api_token_create
    from scheduling.models import GpuModel, Quota

    user = get_user_model().objects.create(username="submitter")
    team = Team.objects.create(name="Submit", slug="submit")
    Membership.objects.create(user=user, team=team)
    Quota.objects.create(team=team, gpu_model=GpuModel.objects.get(key="t4"), nominal=8)
    _, secret = api_token_create(user=user, name="micro")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}", HTTP_HOST="localhost")
    body = {
        "team": "submit",
        "name": "micro",
        "image": "busybox",
        "command": ["true"],
        "gpus_per_replica": 1,
        "gpu_models": ["t4"],
    }

    def submit() -> None:
        answer = client.post("/api/v1/jobs/", body, content_type="application/json")
        if answer.status_code != 201:
            raise SystemExit(f"submit answered {answer.status_code}: {answer.content[:300]!r}")

    for _ in range(20):  # warm: imports, caches, the token's in-process memory
        submit()
    spent = cpu_ms(submit, runs)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(10):
        submit()
    profile.disable()
    calls = pstats.Stats(profile).total_calls / 10  # type: ignore[attr-defined]
    print(
        f"submit: POST /api/v1/jobs/ in process {statistics.median(spent):.2f} ms CPU "
        f"(median of {runs}), {calls:,.0f} Python function calls per submit"
    )


def decide_figures(runs: int, pending: int = 5000) -> None:
    from dataclasses import replace

    import engine_bench
    import yaml

    spec = yaml.safe_load((ROOT / "bench/scenarios/engine.yaml").read_text())
    pool = engine_bench.make_pool(spec, spec["seed"])
    jobs = engine_bench.make_pending(spec, pool.teams, pending, spec["seed"] + 1)
    snapshot = replace(pool, pending=engine_bench.in_line_order(jobs))
    config = engine_bench.EngineConfig(lookback_per_team=10**9)  # as the engine bench's main case

    def decide() -> None:
        engine_bench.decide(snapshot, config)

    decide()  # warm
    spent = cpu_ms(decide, runs)
    profile = cProfile.Profile()
    profile.enable()
    decide()
    profile.disable()
    calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    print(
        f"decide: {pending:,} pending, {statistics.median(spent):.1f} ms CPU median, "
        f"{min(spent):.1f} min (of {runs}), {calls:,} Python function calls per decide"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run of every step")
    parser.add_argument("--rows", type=int, default=9000, help="ids and waits per step (9,000)")
    args = parser.parse_args()
    rows = 500 if args.quick else args.rows
    runs = 3 if args.quick else 15
    print(calibration_line())
    _database("create")
    try:
        setup_django()
        ids_figures(rows, runs)
        waits_figures(seed_queued(rows), runs)
        submit_figures(20 if args.quick else 300)
        decide_figures(3 if args.quick else 15)
    finally:
        from django.db import connections

        connections.close_all()
        _database("drop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
