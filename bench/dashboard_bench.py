"""Dashboards at scale: the pool overview page and ``/api/v1/pool/history/`` for 7 days over
1,000,000 historical jobs and 30 days of minute snapshots for 5 clusters x 6 models x 200
teams (dense: every team has a row for every model every minute, the worst case).

Bulk-loads its own database (created and dropped here) with SQL ``generate_series``, then
renders each page in-process (Django's test client: middleware, views, templates) and prints
p50 / p99 / mean and the SQL queries per page. Also times the minute snapshot and one hour's
downsample on that data. ``--quick`` loads 2 days, 20 teams and 50,000 jobs.

    .venv/bin/python bench/dashboard_bench.py [--quick] [--keep | --reuse] [--runs N]
        [--days D] [--teams T] [--jobs J]

The database is ``gpupool_dashbench`` on ``DATABASE_URL``'s server, or ``GPUPOOL_BENCH_DB``
(two people benchmarking on one server each name their own).
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

BENCH_DB = os.environ.get("GPUPOOL_BENCH_DB") or "gpupool_dashbench"
BASE_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpupool")
SERVER_URL = BASE_URL.rsplit("/", 1)[0]
TARGET_MS = 150.0

MODELS = ("h100-sxm", "a100-80gb", "a100-40gb", "l40s", "v100-32gb", "t4")
CLUSTERS = 5
NODES_PER_POOL = 20  # per (cluster, model), 8 GPUs each: 4,800 GPUs in all


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
    os.environ["ALLOWED_HOSTS"] = "testserver,localhost,127.0.0.1"
    os.environ["GPUPOOL_METRICS_TOKEN"] = "bench-scrape-token"  # /metrics answers no one without
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("seed_catalog", verbosity=0)


def step(label: str, started: float) -> float:
    now = time.perf_counter()
    print(f"  {label:<52} {now - started:7.1f} s", flush=True)
    return now


def give_fields_their_defaults(model: type) -> None:
    """Set each column's Django default as the bench database's column default, so the bulk
    INSERTs below name only the columns the pages read and keep working when a model gains a
    field (this database is the bench's own and is dropped afterwards)."""
    from django.db import connection

    table = model._meta.db_table
    with connection.cursor() as cur:
        for f in model._meta.concrete_fields:
            if f.primary_key or f.null:
                continue
            if f.has_default() and callable(f.default) and f.default not in (list, dict):
                continue  # a fresh value per row (a UUID, now): the INSERTs name these
            default = f.get_default()  # the field's default, or "" for a text field without one
            if default is None:
                continue
            value = f.get_db_prep_save(default, connection)
            literal = cur.mogrify("%s", [value])
            cur.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{f.column}" SET DEFAULT {literal}')


def load(*, days: int, teams: int, jobs: int) -> None:
    """Reference rows through the ORM; the big tables with INSERT … SELECT generate_series."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from clusters.models import Cluster, Node
    from portal.jobs.waits import ORDER_KEY_GAP
    from portal.models import Job, Membership, Role, Team
    from scheduling.models import GpuModel, Quota, TeamPolicy

    t = time.perf_counter()
    now = timezone.now()
    models = [GpuModel.objects.get(key=k) for k in MODELS]
    clusters = [
        Cluster.objects.create(name=f"c{i}", api_url=f"https://c{i}.k8s.test")
        for i in range(CLUSTERS)
    ]
    Node.objects.bulk_create(
        Node(
            cluster=c,
            name=f"{m.key}-{n}",
            gpu_model=m,
            gpu_capacity=8,
            gpu_allocatable=8,
            gpus_used_by_others=1 if n == 0 else 0,
            ready=n != 1,
            schedulable=n != 2,
            last_seen_at=now,
        )
        for c in clusters
        for m in models
        for n in range(NODES_PER_POOL)
    )
    team_rows = Team.objects.bulk_create(
        Team(name=f"Team {i:03d}", slug=f"team-{i:03d}") for i in range(teams)
    )
    users = get_user_model().objects.bulk_create(
        get_user_model()(username=f"user{i:03d}") for i in range(teams)
    )
    Membership.objects.bulk_create(
        Membership(user=u, team=tm, role=Role.MEMBER)
        for u, tm in zip(users, team_rows, strict=True)
    )
    get_user_model().objects.create(username="bench-admin", is_staff=True, is_superuser=True)
    TeamPolicy.objects.bulk_create(
        TeamPolicy(team=tm, weight=1 + i % 3) for i, tm in enumerate(team_rows)
    )
    Quota.objects.bulk_create(
        Quota(team=tm, gpu_model=m, nominal=2 + (i + j) % 6)
        for i, tm in enumerate(team_rows)
        for j, m in enumerate(models)
    )
    t = step(f"reference rows ({teams} teams, {len(clusters) * 6 * NODES_PER_POOL} nodes)", t)

    team0, user0 = team_rows[0].pk, users[0].pk
    model_ids = "ARRAY[" + ",".join(str(m.pk) for m in models) + "]::bigint[]"
    model_keys = "ARRAY[" + ",".join(f"'{m.key}'" for m in models) + "]"
    cluster_ids = "ARRAY[" + ",".join(str(c.pk) for c in clusters) + "]::bigint[]"
    span = days * 86400
    running, queued = 1500, 3000
    from portal.models import PendingNotes

    # Queued jobs wait one of six ways (one per model), as the cycle would store them.
    PendingNotes.objects.bulk_create(
        PendingNotes(
            key=f"bench-{i + 1}",
            notes=[
                ["t4", "REQUIREMENT_NOT_MET", "t4: does not meet the requirement", "never"],
                [m.key, "QUOTA_FULL", f"{m.key}: team quota full: team uses 8 of 8", "lead"],
                [models[(i + 1) % 6].key, "NO_NODE_FITS", "no node with 2 free", "other"],
            ],
        )
        for i, m in enumerate(models[:6])
    )
    give_fields_their_defaults(Job)
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO portal_job (
              public_id, team_id, owner_id, name, kind, image, command, args, env, replicas,
              gpus_per_replica, cpu_millicores, memory_mib, gpu_models, min_gpu_memory_gib,
              requires_bf16, requires_fp8, min_fp16_tflops, selection_policy, allow_fallback,
              priority, max_runtime_seconds, port, state, state_changed_at, submitted_at,
              admitted_at, started_at, finished_at, cluster_id, gpu_model_id,
              node_plan, placement,
              volcano_job_name, dispatch_attempts, usage_accounted_until, idempotency_key,
              request_fingerprint, max_retry,
              env_from_secrets, dispatch_owner, cancel_reason, preemption_count)
            SELECT gen_random_uuid(), {team0} + g % {teams}, {user0} + g % {teams},
              'job-' || g, 'training', 'nvcr.io/nvidia/pytorch:24.05-py3', '["python"]', '[]',
              '{{}}', 1, 1 + g % 2, 4000, 16384,
              CASE WHEN g % 3 = 0 THEN '[]'::jsonb
                   ELSE jsonb_build_array(({model_keys})[1 + g % 6]) END,
              CASE WHEN g % 3 = 0 THEN 16 * (1 + g % 4) END, false, false, NULL, 'cheapest',
              true, 50, 86400, NULL, st.state, sub + interval '1 hour', sub,
              CASE WHEN st.state <> 'QUEUED' THEN sub + interval '5 minutes' END,
              CASE WHEN st.state <> 'QUEUED' THEN sub + interval '6 minutes' END,
              CASE WHEN st.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                   THEN sub + interval '66 minutes' END,
              CASE WHEN st.state <> 'QUEUED' THEN ({cluster_ids})[1 + (g / 6) % {CLUSTERS}] END,
              CASE WHEN st.state <> 'QUEUED' THEN ({model_ids})[1 + g % 6] END,
              CASE WHEN st.state = 'RUNNING'
                   THEN jsonb_build_array(
                     ({model_keys})[1 + g % 6] || '-' || (g % {NODES_PER_POOL}))
                   ELSE '[]'::jsonb END,
              '{{}}', '', 0, NULL, NULL, '', 3,
              '{{}}', '', '', 0
            FROM generate_series(1, {jobs}) AS g,
            LATERAL (SELECT CASE WHEN g <= {running} THEN 'RUNNING'
                                 WHEN g <= {running + queued} THEN 'QUEUED'
                                 WHEN g % 10 = 0 THEN 'FAILED'
                                 WHEN g % 10 = 1 THEN 'CANCELLED'
                                 ELSE 'SUCCEEDED' END AS state,
                            now() - make_interval(secs => CASE WHEN g <= {running + queued}
                                 THEN g * 0.5 ELSE (g::float8 * {span} / {jobs}) END) AS sub) st
            """
        )
        t = step(f"jobs ({jobs:,})", t)
        # The last cycle's wait of each queued job, in line order (``JobWait``).
        cur.execute(
            f"""
            INSERT INTO portal_jobwait (job_id, code, reason, order_key, notes_id, model)
            SELECT id, 'QUOTA_EXHAUSTED', 'needs GPUs; team quota full',
              ROW_NUMBER() OVER (ORDER BY id) * {ORDER_KEY_GAP}, 'bench-' || (1 + id % 6),
              ({model_keys})[1 + id % 6]
            FROM portal_job WHERE state = 'QUEUED'
            """
        )
        t = step("waits (one per queued job)", t)
        cur.execute(
            """
            INSERT INTO dashboards_queuewait (event_id, job_id, team_id, gpu_model_id, gpus,
              queued_at, started_at, wait_seconds)
            SELECT j.id, j.id, j.team_id, j.gpu_model_id, j.gpus_per_replica,
              j.submitted_at, j.started_at, 60 + (j.id % 97) * 37
            FROM portal_job j WHERE j.started_at IS NOT NULL
            """
        )
        t = step("queue waits (one per started job)", t)

        start = f"date_trunc('minute', now()) - interval '{days} days'"
        series = (
            f"generate_series({start} + interval '1 minute', date_trunc('minute', now()), "
            "interval '1 minute')"
        )
        wave = "sin(extract(epoch FROM at) / 3600.0 + {k})"
        # Bulk load without the per-series unique indexes; they are built once afterwards.
        constraints = {
            "dashboards_poolminute": ("one_pool_minute_per_series", "at, cluster_id, gpu_model_id"),
            "dashboards_teammodelminute": (
                "one_team_model_minute_per_series",
                "at, team_id, gpu_model_id",
            ),
            "dashboards_teamminute": ("one_team_minute_per_series", "at, team_id"),
        }
        for table, (name, _cols) in constraints.items():
            cur.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        cur.execute(
            "INSERT INTO dashboards_snapshotrun (at, taken_at, took_ms, gpus_allocated) "
            f"SELECT at, at, 40, 0 FROM {series} AS at"
        )
        cur.execute(
            f"""
            INSERT INTO dashboards_poolminute (at, cluster_id, gpu_model_id, gpus_total,
              gpus_allocatable, gpus_allocated, gpus_used_by_others, gpus_free, gpus_unavailable,
              gpus_fragmented, largest_free_block, nodes_total, nodes_not_ready, nodes_cordoned)
            SELECT at, c, m, 160, 160, a, 1, 143 - a, 16, (143 - a) / 3, 8, 20, 1, 1
            FROM {series} AS at, unnest({cluster_ids}) AS c, unnest({model_ids}) AS m,
            LATERAL (SELECT (70 + 60 * {wave.format(k="c + m")})::int AS a) v
            """
        )
        cur.execute(
            """
            UPDATE dashboards_snapshotrun s SET gpus_allocated = p.total
            FROM (SELECT at, sum(gpus_allocated) AS total FROM dashboards_poolminute
                  GROUP BY at) p
            WHERE p.at = s.at
            """
        )
        t = step(f"pool minutes ({days} d x {CLUSTERS} clusters x 6 models)", t)
        cur.execute(
            f"""
            INSERT INTO dashboards_teammodelminute (at, team_id, gpu_model_id, gpus_allocated,
              gpus_running, nominal, borrowed, pending_gpus, queued_jobs)
            SELECT at, tm, m, a, a, 4, greatest(0, a - 4), (tm + m) % 5, (tm + m) % 3
            FROM {series} AS at, generate_series({team0}, {team0 + teams - 1}) AS tm,
                 unnest({model_ids}) AS m,
            LATERAL (SELECT (3 + 3 * {wave.format(k="tm * 7 + m")})::int AS a) v
            """
        )
        t = step(f"team x model minutes ({days} d x {teams} teams x 6 models)", t)
        cur.execute(
            f"""
            INSERT INTO dashboards_teamminute (at, team_id, gpus_allocated, gpus_running,
              pending_gpus, queued_jobs, weight, allocation_share, usage_share, share,
              target_share)
            SELECT at, tm, a, a, tm % 11, tm % 4, 1 + tm % 3, a / 800.0, 0.01, a / 800.0,
                   1.0 / {teams}
            FROM {series} AS at, generate_series({team0}, {team0 + teams - 1}) AS tm,
            LATERAL (SELECT (18 + 18 * {wave.format(k="tm")})::int AS a) v
            """
        )
        t = step(f"team minutes ({days} d x {teams} teams)", t)
        for table, (name, cols) in constraints.items():
            cur.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} UNIQUE ({cols})")
        t = step("unique indexes of the minute series", t)
        hours = (
            f"generate_series(date_trunc('hour', now()) - interval '{days} days', "
            "date_trunc('hour', now()) - interval '1 hour', interval '1 hour')"
        )
        cur.execute(
            "INSERT INTO dashboards_hourrun (at, samples, gpus_allocated, gpus_allocated_peak) "
            f"SELECT at, 60, 0, 0 FROM {hours} AS at"
        )
        cur.execute(
            f"""
            INSERT INTO dashboards_poolhour (at, cluster_id, gpu_model_id, gpus_total,
              gpus_allocatable, gpus_allocated, gpus_used_by_others, gpus_free, gpus_unavailable,
              gpus_fragmented, largest_free_block, nodes_total, nodes_not_ready, nodes_cordoned,
              gpus_allocated_peak)
            SELECT h.at, p.cluster_id, p.gpu_model_id, avg(p.gpus_total), avg(p.gpus_allocatable),
              avg(p.gpus_allocated), avg(p.gpus_used_by_others), avg(p.gpus_free),
              avg(p.gpus_unavailable), avg(p.gpus_fragmented), avg(p.largest_free_block),
              avg(p.nodes_total), avg(p.nodes_not_ready), avg(p.nodes_cordoned),
              max(p.gpus_allocated)
            FROM {hours} AS h(at) JOIN dashboards_poolminute p
              ON p.at >= h.at AND p.at < h.at + interval '1 hour'
            GROUP BY h.at, p.cluster_id, p.gpu_model_id
            """
        )
        cur.execute(
            """
            UPDATE dashboards_hourrun h SET gpus_allocated = x.mean, gpus_allocated_peak = x.peak
            FROM (SELECT p.at, sum(p.gpus_allocated) AS mean, max(r.peak) AS peak
                  FROM dashboards_poolhour p
                  JOIN (SELECT date_trunc('hour', at) AS at, max(gpus_allocated) AS peak
                        FROM dashboards_snapshotrun GROUP BY 1) r ON r.at = p.at
                  GROUP BY p.at) x
            WHERE x.at = h.at
            """
        )
        cur.execute(
            """
            INSERT INTO dashboards_teammodelhour (at, team_id, gpu_model_id, gpus_allocated,
              gpus_running, nominal, borrowed, pending_gpus, queued_jobs, gpus_allocated_peak)
            SELECT date_trunc('hour', at), team_id, gpu_model_id, avg(gpus_allocated),
              avg(gpus_running), avg(nominal), avg(borrowed), avg(pending_gpus),
              avg(queued_jobs), max(gpus_allocated)
            FROM dashboards_teammodelminute WHERE at < date_trunc('hour', now())
            GROUP BY 1, 2, 3
            """
        )
        cur.execute(
            """
            INSERT INTO dashboards_teamhour (at, team_id, gpus_allocated, gpus_running,
              pending_gpus, queued_jobs, weight, allocation_share, usage_share, share,
              target_share, gpus_allocated_peak)
            SELECT date_trunc('hour', at), team_id, avg(gpus_allocated), avg(gpus_running),
              avg(pending_gpus), avg(queued_jobs), avg(weight), avg(allocation_share),
              avg(usage_share), avg(share), avg(target_share), max(gpus_allocated)
            FROM dashboards_teamminute WHERE at < date_trunc('hour', now())
            GROUP BY 1, 2
            """
        )
        t = step("hourly series (downsampled in SQL)", t)
    connection.close()
    import psycopg

    with psycopg.connect(f"{SERVER_URL}/{BENCH_DB}", autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    step("vacuum analyze", t)


def sizes() -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT c.relname, c.reltuples::bigint, pg_total_relation_size(c.oid)
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind = 'r'
              AND (c.relname LIKE 'dashboards_%' OR c.relname = 'portal_job')
            ORDER BY 3 DESC
            """
        )
        print("\n  table                              rows (est.)        size")
        for name, rows, size in cur.fetchall():
            print(f"  {name:<32} {rows:>13,} {size / 2**20:>9,.0f} MiB")


def measure(client, url: str, runs: int) -> tuple[list[float], int, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    headers = {"HTTP_HX_REQUEST": "true"} if "fragment=" in url else {}
    if url == "/metrics":
        headers["HTTP_AUTHORIZATION"] = f"Bearer {os.environ['GPUPOOL_METRICS_TOKEN']}"
    for _ in range(2):  # warm caches (Python imports, Postgres buffers)
        client.get(url, **headers)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(url, **headers)
        if hasattr(response, "streaming_content"):
            b"".join(response.streaming_content)
        times.append((time.perf_counter() - started) * 1e3)
    with CaptureQueriesContext(connection) as queries:
        client.get(url, **headers)
    return times, len(queries), response.status_code


def pages(runs: int) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client

    member, admin = Client(), Client()
    user = get_user_model().objects.get(username="user001")
    member.force_login(user)
    from portal.models import Job, Membership

    queued_job = (
        Job.objects.filter(
            state="QUEUED",
            team_id__in=Membership.objects.filter(user=user).values("team_id"),
        )
        .order_by("id")
        .values_list("public_id", flat=True)
        .first()
    )
    admin.force_login(get_user_model().objects.get(username="bench-admin"))
    checks = [
        ("pool overview page (/, 24 h chart)", member, "/"),
        ("pool history API, 7 days", member, "/api/v1/pool/history/?since=7d"),
        (
            "pool history API, 7 days, one model",
            member,
            "/api/v1/pool/history/?since=7d&model=a100-80gb",
        ),
        (
            "pool history API, 24 h in 10 min steps",
            member,
            "/api/v1/pool/history/?since=24h&step=10m",
        ),
        ("overview live fragment (every 15 s)", member, "/?fragment=live"),
        ("overview chart, 1 h", member, "/?fragment=chart&range=1h"),
        ("overview chart, 7 d", member, "/?fragment=chart&range=7d"),
        ("overview chart, 30 d", member, "/?fragment=chart&range=30d"),
        ("cluster view (admin, all nodes)", admin, "/pool/clusters/"),
        ("fair share page (every team)", member, "/fair-share/"),
        ("queue page (3,000 queued, wait table)", member, "/queue/"),
        ("queue page, longest waiting first", member, "/queue/?sort=waiting"),
        ("queue live fragment (every 5 s)", member, "/queue/?fragment=live"),
        ("queue, every team (admin, a page of 100)", admin, "/queue/"),
        ("queue, oldest of each team (admin)", admin, "/queue/?view=oldest"),
        ("queued job page (blocker, estimate)", member, f"/jobs/{queued_job}/"),
        ("queued job API (blocker, estimate)", member, f"/api/v1/jobs/{queued_job}/"),
        ("queue stats API (7 d of waits, cached)", member, "/api/v1/queue/stats/"),
        ("pool API", member, "/api/v1/pool/"),
        ("/metrics", admin, "/metrics"),
    ]
    print(f"\n  {'page':<44} {'p50':>8} {'p99':>8} {'mean':>8} {'SQL':>4}  target")
    for label, client, url in checks:
        times, queries, status = measure(client, url, runs)
        p50 = statistics.median(times)
        p99 = statistics.quantiles(times, n=100)[98] if len(times) >= 2 else times[0]
        verdict = "ok" if p50 < TARGET_MS else "SLOW"  # every page: < 150 ms p50
        print(
            f"  {label:<44} {p50:7.1f}ms {p99:7.1f}ms {statistics.mean(times):7.1f}ms "
            f"{queries:>4}  {verdict}{'' if status == 200 else f' HTTP {status}'}",
            flush=True,
        )


def writers() -> None:
    import datetime as dt

    from django.utils import timezone

    from dashboards.snapshots import snapshot_downsample, snapshot_take

    started = time.perf_counter()
    result = snapshot_take(now=timezone.now() + dt.timedelta(minutes=1))
    took = (time.perf_counter() - started) * 1e3
    print(
        f"\n  minute snapshot: {took:.0f} ms ({result.pool_rows} pool, "
        f"{result.team_model_rows} team x model, {result.team_rows} team rows)"
    )
    from dashboards.models import HourRun

    last = HourRun.objects.order_by("-at").first()
    if last is not None:
        HourRun.objects.filter(pk=last.pk).delete()
        started = time.perf_counter()
        done = snapshot_downsample(now=timezone.now())
        print(
            f"  downsample of one hour: {(time.perf_counter() - started) * 1e3:.0f} ms "
            f"({len(done)} hour)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 days, 20 teams, 50,000 jobs")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--reuse", action="store_true", help="measure again on the database a --keep run left"
    )
    parser.add_argument("--runs", type=int, default=0, help="renders per page")
    parser.add_argument("--days", type=int, help="days of minute snapshots (default 30)")
    parser.add_argument("--teams", type=int, help="teams (default 200)")
    parser.add_argument("--jobs", type=int, help="historical jobs (default 1,000,000)")
    args = parser.parse_args()
    days, teams, jobs = (2, 20, 50_000) if args.quick else (30, 200, 1_000_000)
    # The dense 30-day minute series alone is 52 M rows (a quarter hour to load here): the
    # pages' cost in jobs can be measured at 1 M jobs over fewer days of minutes.
    days, teams, jobs = args.days or days, args.teams or teams, args.jobs or jobs
    runs = args.runs or (10 if args.quick else 30)
    print(
        f"dashboard bench: {jobs:,} jobs, {days} days of minute snapshots, "
        f"{CLUSTERS} clusters x 6 models x {teams} teams; {runs} renders per page"
    )
    if not args.reuse:
        recreate_database()
    try:
        setup_django()
        if not args.reuse:
            started = time.perf_counter()
            load(days=days, teams=teams, jobs=jobs)
            print(f"  loaded in {time.perf_counter() - started:.0f} s")
        sizes()
        pages(runs)
        writers()
    finally:
        from django.db import connections

        connections.close_all()
        if not (args.keep or args.reuse):
            drop_database()


if __name__ == "__main__":
    main()
