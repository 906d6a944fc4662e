"""Fairness simulation: three teams of weights 1:1:2 on 16 GPUs of two models, over days.

    .venv/bin/python bench/fairness_sim.py [--days 14] [--seeds 5] [--cycle-minutes 10]
                                           [--guard-hours 2] [--max-holds 4] [--quick]

Prints each team's share of cost-weighted GPU-hours (the unit fair share divides; plain
GPU-hours below it) against its weight, the worst relative deviation, and
waits (median, 95th percentile, worst including jobs still queued) per seed. The same
simulation asserts in tests/scheduling/engine/test_fairness.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rules.engine import EngineConfig  # noqa: E402
from tests.scheduling.engine.fairness import WEIGHTS, simulate  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=14)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cycle-minutes", type=int, default=10)
    parser.add_argument("--guard-hours", type=float, default=2, help="starvation wait")
    parser.add_argument("--max-holds", type=int, default=4, help="0 switches the guard off")
    parser.add_argument("--quick", action="store_true", help="one seed, 7 days")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.days = 1, min(args.days, 7)
    config = EngineConfig(
        starvation_wait=timedelta(hours=args.guard_hours), max_capacity_holds=args.max_holds
    )
    total = sum(WEIGHTS.values())
    print(
        f"{len(WEIGHTS)} teams, weights "
        + ":".join(f"{w:g}" for w in WEIGHTS.values())
        + f", 16 GPUs (8 A100 + 8 L4), {args.days:g} days, cycle every {args.cycle_minutes} min"
        + f", starvation guard {args.guard_hours:g} h, max holds {args.max_holds}"
    )
    print("target shares: " + ", ".join(f"{t} {w / total:.1%}" for t, w in WEIGHTS.items()))
    worst = 0.0
    for seed in range(1, args.seeds + 1):
        t0 = time.perf_counter()
        r = simulate(days=args.days, seed=seed, cycle_minutes=args.cycle_minutes, config=config)
        shares = r.shares()
        plain = r.gpu_hour_shares()
        dev = max(abs(shares[t] / (w / total) - 1) for t, w in WEIGHTS.items())
        worst = max(worst, dev)
        print(
            f"\nseed {seed}: shares "
            + ", ".join(f"{t} {shares[t]:.1%}" for t in WEIGHTS)
            + f"; worst deviation {dev:.1%} ({r.cycles} cycles, {time.perf_counter() - t0:.1f} s)"
        )
        print("  plain GPU-hours: " + ", ".join(f"{t} {plain[t]:.1%}" for t in WEIGHTS))
        for team in WEIGHTS:
            waits = sorted(r.waits_hours[team])
            p95 = waits[int(0.95 * (len(waits) - 1))] if waits else 0.0
            print(
                f"  {team:6} admitted {r.admitted[team]:4}, refused at the queue cap "
                f"{r.dropped[team]:4}; wait median {statistics.median(waits):5.1f} h, "
                f"p95 {p95:5.1f} h, worst {r.max_wait()[team]:5.1f} h"
            )
    print(f"\nworst deviation from the weights over {args.seeds} seeds: {worst:.1%} (goal <= 10%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
