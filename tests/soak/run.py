"""The soak and fault suite: the production shape on this machine, faults injected, figures
printed.

    .venv/bin/python -m tests.soak.run [--tier short|full] [--only NAME ...] [--keep]

Starts a private PostgreSQL cluster and a private, non-persistent Redis (both on free ports,
restarted by the scenarios that restart them; never the shared ones), kubesim in this process,
then gunicorn, two Celery workers (thread pools), beat and ``manage.py watch_clusters`` with a
production environment, and runs the scenarios in order against the same stack. Prints one
row per scenario (one per kill point for the worker kills): jobs, faults injected, lost,
duplicated, stuck, seconds to converge, and notes; exits 1 if any row has a problem (a job
lost, doubled or stuck, an answer 5xx other than a 503, a process that died by itself).
``make soak`` runs the full tier; ``make test`` the short one (``tests/soak/test_soak.py``),
less the ``SOAK_ONLY`` scenarios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.soak import scenarios, stack_faults  # noqa: E402
from tests.soak.harness import World  # noqa: E402

# What the stack runs with besides the production defaults, and why.
SOAK_ENV = {
    # A hung create costs a worker slot for this long: 4 s keeps the timeout scenarios short.
    "GPUPOOL_CLUSTER_TIMEOUT_SECONDS": "4",
    "LOG_LEVEL": "INFO",
}

SCENARIOS: dict[str, Callable[[World, scenarios.Tier], object]] = {
    "submits": scenarios.submits_from_many_clients,
    "worker-kills": scenarios.worker_kills,
    "watcher-kills": scenarios.watcher_kills,
    "redis-restart": scenarios.redis_restart,
    "postgres-restart": scenarios.postgres_restart,
    "cluster-faults": scenarios.cluster_faults,
    "node-failures": scenarios.node_failures,
    "quota-race": scenarios.quota_race,
    "web-kills": stack_faults.web_kills,
    "two-schedulers": stack_faults.two_schedulers,
    "postgres-limit": stack_faults.postgres_limit,
    "slow-cluster": stack_faults.slow_cluster,
}

# Run by ``make soak`` only: together they add about two minutes to the short tier, more than
# ``make test`` can spend on them. ``--only`` runs them in either tier.
SOAK_ONLY = ("web-kills", "two-schedulers", "postgres-limit", "slow-cluster")

HEADER = (
    f"{'scenario':<58} {'jobs':>5} {'faults':>6} {'lost':>5} {'dup':>4} {'stuck':>5} "
    f"{'converge':>9}"
)


def _line(row: scenarios.Row) -> str:
    converge = f"{row.converge_s:7.1f} s" if row.converge_s is not None else "        -"
    text = (
        f"{row.name[:58]:<58} {row.jobs:>5} {row.faults:>6} {row.lost:>5} {row.duplicated:>4} "
        f"{row.stuck:>5} {converge:>9}"
    )
    if row.notes:
        text += "\n" + " " * 4 + "; ".join(row.notes)
    for problem in row.problems:
        text += "\n" + " " * 4 + "PROBLEM: " + problem
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tier", choices=["short", "full"], default="short")
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), default=None)
    parser.add_argument("--keep", action="store_true", help="keep the logs folder afterwards")
    args = parser.parse_args(argv)
    tier = scenarios.FULL if args.tier == "full" else scenarios.SHORT
    names = args.only or [n for n in SCENARIOS if tier is scenarios.FULL or n not in SOAK_ONLY]

    folder = Path(tempfile.mkdtemp(prefix="gpupool-soak-"))
    world = World(folder, extra_env=SOAK_ENV)
    rows: list[scenarios.Row] = []
    began = time.monotonic()
    print(f"soak ({tier.name} tier): {', '.join(names)}", flush=True)
    try:
        world.start()
        print(f"stack up in {time.monotonic() - began:.0f} s (logs under {folder})", flush=True)
        print(HEADER, flush=True)
        for name in names:
            result = SCENARIOS[name](world, tier)
            for row in result if isinstance(result, list) else [result]:
                rows.append(row)
                print(_line(row), flush=True)
    except Exception:
        import traceback

        traceback.print_exc()
        for service in world.stack.services.values():
            print(f"--- {service.name} (last lines) ---\n{service.tail(1500)}")
        rows.append(scenarios.Row("(the suite itself)", problems=["crashed"]))
    finally:
        world.close()
    bad = [r for r in rows if not r.ok]
    totals = (
        f"total: {sum(r.jobs for r in rows)} jobs, {sum(r.faults for r in rows)} faults, "
        f"{sum(r.lost for r in rows)} lost, {sum(r.duplicated for r in rows)} duplicated, "
        f"{sum(r.stuck for r in rows)} stuck; {time.monotonic() - began:.0f} s"
    )
    print(totals, flush=True)
    if bad or args.keep:
        print(f"logs kept under {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.exit(main())
