"""Prints the schemathesis totals (``test_api_schema.py``) at the end of a run, also under xdist:
each of its tests records its request counts in its report's ``user_properties``."""

from __future__ import annotations

from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    tests = positive = negative = 0
    seeds: set[int] = set()
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "teardown":
                continue
            for name, value in getattr(report, "user_properties", ()):
                if name == "schemathesis":
                    tests += 1
                    positive += value["positive"]
                    negative += value["negative"]
                    seeds.add(value["seed"])
    if not tests:
        return
    failed = [
        r.nodeid for r in terminalreporter.stats.get("failed", []) if "test_api_schema" in r.nodeid
    ]
    terminalreporter.write_line(
        f"schemathesis: {tests} tests (each API operation, and chains of them), "
        f"{positive + negative:,} requests ({positive:,} schema-valid, {negative:,} invalid), "
        f"{len(failed)} failed; seed {', '.join(map(str, sorted(seeds)))} (GPUPOOL_FUZZ_SEED)"
    )
