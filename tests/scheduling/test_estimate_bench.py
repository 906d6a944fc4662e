"""bench/estimate_bench.py, quick tier: both traces replayed small, the table's shape and
sanity (not its timings, nor the goals, which need the full replay). Pure, no database; the
production trace lives in /work/shared/traces (not in the repository): skipped without it."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "estimate_bench.py"
_spec = importlib.util.spec_from_file_location("estimate_bench", BENCH)
assert _spec and _spec.loader
eb = importlib.util.module_from_spec(_spec)
sys.modules["estimate_bench"] = eb  # dataclasses look their module up by name
_spec.loader.exec_module(eb)
traces = sys.modules["estimate_traces"]  # its sibling module, imported through bench/ on sys.path

ROW = re.compile(
    r"^    (forecast|history|slurm) +(nan|\d+\.\d) min +(nan|\d+) min +(-|\d+%) +\d+% +\d+$"
)


@pytest.mark.skipif(
    not (traces.TRACE_DIR / "openb_pod_list_default.csv").exists(), reason="no Alibaba trace here"
)
def test_the_estimate_bench_replays_both_traces_and_prints_both_baselines(capsys) -> None:
    assert eb.main(["--no-cost", "--hours", "1", "--days", "0.3", "--first-day", "140"]) == 0
    out = capsys.readouterr().out
    titles = [line for line in out.splitlines() if not line.startswith(" ")]
    assert titles[0].startswith("synthetic: ") and titles[1].startswith("alibaba-gpu-2023: ")
    rows = [
        ROW.match(line)
        for line in out.splitlines()
        if line.startswith("    ") and not line.startswith("    estimate")
    ]
    assert all(rows) and len(rows) == 12  # 3 estimates x (every job, jobs that waited) x 2
    assert out.count("median |err|") == 4 and out.count("P90 |err|") == 4
    # Only the forecast shows a range; over every job most starts fall inside it.
    assert all(m[4] == "-" for m in rows if m[1] != "forecast")
    every_job = [m for m in rows if m[1] == "forecast"][::2]
    assert len(every_job) == 2 and all(int(m[4].rstrip("%")) >= 50 for m in every_job)
    assert "goal: 80-95 %" in out
