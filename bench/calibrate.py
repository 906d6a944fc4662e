"""How fast this machine runs plain Python right now, printed next to a benchmark's figures.

The shared 2-core machines here vary by a factor of two or more from one hour to the next.
CPU-per-job figures scale with this line, so two runs are best compared through it.
"""

from __future__ import annotations

import statistics
import time


def empty_loop_ms() -> float:
    """Median of three timings of an empty 1,000,000-iteration loop, in milliseconds."""
    timings = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(1_000_000):
            pass
        timings.append((time.perf_counter() - t0) * 1000)
    return statistics.median(timings)


def calibration_line() -> str:
    return (
        f"calibration: an empty 1,000,000-iteration Python loop takes {empty_loop_ms():.0f} ms "
        "on this machine now"
    )
