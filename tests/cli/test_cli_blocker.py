"""``gpupool show`` says why a queued job waits once, in the portal's plain sentence; the
code stays in ``--json`` (the API's ``blocker.code`` and ``blocker.sentence``)."""

from __future__ import annotations

import json

import pytest

from portal.jobs.services import job_submit
from scheduling.cycle import run_cycle
from tests.conftest import job_body
from tests.scheduling.conftest import pool, quota  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def test_show_says_the_blocker_once_in_plain_words(cli, bob, vision, pool, quota):  # noqa: F811
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=16)
    job_submit(user=bob, data=job_body(name="big", replicas=1, gpus_per_replica=6))
    run_cycle()
    job_submit(user=bob, data=job_body(name="waiting", replicas=1, gpus_per_replica=4))
    run_cycle()

    shown = cli(bob, "show", "waiting")
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    [waiting] = [line for line in lines if line.startswith("waiting:")]
    assert "No GPUs that fit it are free now: needs 4" in waiting
    assert "largest free block 2" in waiting
    assert shown.stdout.count("largest free block 2") == 1  # said once, not three times
    assert "NO_CAPACITY" not in shown.stdout
    blocker = json.loads(cli(bob, "show", "waiting", "--json").stdout)["blocker"]
    assert blocker["code"] == "NO_CAPACITY"
    assert blocker["sentence"].startswith("No GPUs that fit it are free now: needs 4")
