"""The soak and fault suite's short tier, as part of ``make test``: the production shape on
this machine (private PostgreSQL and Redis, gunicorn, two Celery workers, beat, the watcher,
kubesim), every scenario with small counts, and not one job lost, doubled or stuck, no answer
5xx but a 503, no process dead by itself. ``make soak`` runs the full tier and prints the
figures; ``docs/reliability.md`` has them. The stack's own faults (``SOAK_ONLY`` in
``tests/soak/run.py``: web kill, two schedulers, PostgreSQL's connection limit, a slow cluster)
would add about two minutes: only ``make soak`` runs them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.soak.stack import ROOT

pytestmark = pytest.mark.slow


def test_the_short_soak_loses_doubles_and_strands_no_job():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "tests.soak.run", "--tier", "short"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    figures = "\n".join(
        line for line in result.stdout.splitlines() if " INFO " not in line and line.strip()
    )
    print(figures)
    assert result.returncode == 0, figures[-6000:] + result.stderr[-3000:]
