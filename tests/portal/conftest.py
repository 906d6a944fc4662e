"""Prints the schemathesis totals (``test_api_schema.py``) at the end of a run, also under xdist:
each of its tests records its request counts in its report's ``user_properties``. And a second
connection to the test database, as an operator's, for the tests that drop the portal's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection


@pytest.fixture
def admin() -> Iterator[psycopg.Connection]:
    """A second connection to the same server, autocommit, as an operator's."""
    params = connection.get_connection_params()
    with psycopg.connect(
        dbname=params["dbname"],
        user=params.get("user"),
        host=params.get("host"),
        port=params.get("port"),
        autocommit=True,
    ) as conn:
        yield conn


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
