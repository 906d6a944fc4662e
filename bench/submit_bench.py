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

The load client lives in ``submit_client.py``, the database, Django data and gunicorn in
``submit_server.py``: sibling modules of this script, found through ``sys.path``.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

# Sibling modules, found through sys.path: the load client, then the server under test.
# ``HOST`` and ``_read_response`` are re-exported: pipeline_bench.py drives the portal with them.
from submit_client import HOST as HOST  # noqa: E402
from submit_client import Run, http_request  # noqa: E402
from submit_client import _read_response as _read_response  # noqa: E402
from submit_server import (  # noqa: E402
    BENCH_DB,
    CLIENTS,
    SERVER_CPU,
    Fixture,
    cleanup_redis,
    drive,
    drive_offered,
    drop_database,
    gunicorn,
    recreate_database,
    server_env,
    setup_django_data,
    wait_until_serving,
)

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
