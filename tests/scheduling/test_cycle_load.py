"""The cycle's snapshot reads timestamps and JSON columns in cheap forms; they must read exact.

``EpochMicroseconds`` turns a timestamp into an integer in SQL (a different expression on each
database) and ``json_tuple`` parses each distinct JSON text once. A rounding slip would reorder
jobs submitted in the same second, so both databases are checked to the microsecond.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db.models import F

from portal.models import Job
from rules import engine
from scheduling import cycle, snapshot
from scheduling.snapshot import EpochMicroseconds, from_epoch_us, json_tuple
from tests.factories import JobFactory

ROOT = Path(__file__).resolve().parents[2]
UTC = dt.UTC
TIMES = [
    dt.datetime(2026, 12, 3, 13, 0, 0, tzinfo=UTC),
    dt.datetime(2026, 12, 3, 13, 0, 0, 1, tzinfo=UTC),
    dt.datetime(2026, 12, 3, 13, 0, 0, 999_999, tzinfo=UTC),
    dt.datetime(2031, 2, 28, 23, 59, 59, 123_456, tzinfo=UTC),
    dt.datetime(2001, 9, 9, 1, 46, 40, 500_000, tzinfo=dt.timezone(dt.timedelta(hours=5))),
]


@pytest.mark.django_db
def test_submit_times_read_as_epoch_microseconds_are_exact_on_postgresql(bob, vision):
    ids = [JobFactory(team=vision, owner=bob, submitted_at=t).pk for t in TIMES]
    read = dict(
        Job.objects.filter(pk__in=ids)
        .annotate(us=EpochMicroseconds(F("submitted_at")))
        .values_list("pk", "us")
    )
    assert [from_epoch_us(read[pk]) for pk in ids] == TIMES


@pytest.mark.django_db
def test_the_snapshot_keeps_submit_order_and_model_lists(bob, vision):
    later = JobFactory(team=vision, owner=bob, submitted_at=TIMES[2], gpu_models=["t4", "l4"])
    first = JobFactory(team=vision, owner=bob, submitted_at=TIMES[1], gpu_models=[])
    loaded = snapshot.snapshot_load(now=TIMES[3], config=snapshot.engine_config())
    pending = {p.id: p for p in loaded.snapshot.pending}
    assert pending[str(first.public_id)].submitted_at == TIMES[1]
    assert pending[str(later.public_id)].submitted_at == TIMES[2]
    assert pending[str(later.public_id)].requirement.models == ("t4", "l4")
    assert pending[str(first.public_id)].requirement == engine.Requirement(models=())


@pytest.mark.django_db
def test_each_constraint_a_job_stored_reaches_the_engine_as_that_constraint(bob, vision):
    """The load reads the constraints by position: a swapped pair would run a job needing
    FP8 on a card without it. Each constraint alone, so a swap cannot pass unseen."""
    rows = {
        "memory": JobFactory(team=vision, owner=bob, min_gpu_memory_gib=40),
        "tflops": JobFactory(team=vision, owner=bob, min_fp16_tflops=300),
        "bf16": JobFactory(team=vision, owner=bob, requires_bf16=True),
        "fp8": JobFactory(team=vision, owner=bob, requires_fp8=True),
    }
    loaded = snapshot.snapshot_load(now=TIMES[3], config=snapshot.engine_config())
    got = {p.id: p.requirement for p in loaded.snapshot.pending}
    assert {k: got[str(job.public_id)] for k, job in rows.items()} == {
        "memory": engine.Requirement(models=(), min_memory_gib=40.0),
        "tflops": engine.Requirement(models=(), min_tflops_fp16=300.0),
        "bf16": engine.Requirement(models=(), bf16=True),
        "fp8": engine.Requirement(models=(), fp8=True),
    }


def test_json_tuple_parses_lists_and_treats_empty_text_as_empty():
    assert json_tuple('["a100-80gb", "t4"]') == ("a100-80gb", "t4")
    assert json_tuple("[]") == () == json_tuple(None) == json_tuple("")


SQLITE_CHECK = """
import datetime as dt
from django.db.models import F
from portal.models import Job, Team
from django.contrib.auth import get_user_model
from scheduling.snapshot import EpochMicroseconds, from_epoch_us
UTC = dt.UTC
times = [
    dt.datetime(2026, 12, 3, 13, 0, 0, tzinfo=UTC),
    dt.datetime(2026, 12, 3, 13, 0, 0, 1, tzinfo=UTC),
    dt.datetime(2031, 2, 28, 23, 59, 59, 999_999, tzinfo=UTC),
]
team = Team.objects.create(name="T", slug="t")
owner = get_user_model().objects.create(username="u")
ids = [
    Job.objects.create(
        team=team, owner=owner, name=f"j{i}", image="x", cpu_millicores=1000, memory_mib=1024,
        max_runtime_seconds=60, submitted_at=t, state_changed_at=t,
    ).pk
    for i, t in enumerate(times)
]
read = dict(Job.objects.annotate(us=EpochMicroseconds(F("submitted_at"))).values_list("pk", "us"))
got = [from_epoch_us(read[pk]) for pk in ids]
assert got == times, got
job = Job.objects.create(
    team=team, owner=owner, name="bf16", image="x", cpu_millicores=1000, memory_mib=1024,
    max_runtime_seconds=60, submitted_at=times[1], state_changed_at=times[1],
    requires_bf16=True, gpu_models=["a100-80gb"], min_gpu_memory_gib=24,
)
from scheduling import snapshot
loaded = snapshot.snapshot_load(now=times[2], config=snapshot.engine_config())
pending = {p.id: p for p in loaded.snapshot.pending}
seen = pending[str(job.public_id)]
assert seen.submitted_at == times[1], seen
assert seen.requirement.bf16 is True and seen.requirement.fp8 is False, seen
assert seen.requirement.models == ("a100-80gb",) and seen.requirement.min_memory_gib == 24.0
assert loaded.job_pk[str(job.public_id)] == job.pk
# The cycle's waits go beside the jobs (``JobWait``): inserted, then replaced in place.
from portal.models import JobWait
from scheduling.cycle import run_cycle
run_cycle(now=times[2])
waits = dict(JobWait.objects.values_list("job_id", "order_key"))
assert set(waits) == {*ids, job.pk} and None not in waits.values(), waits
ranks = sorted(Job.objects.get(pk=pk).queue_position for pk in waits)
assert ranks == [1, 2, 3, 4], ranks
JobWait.objects.update(reason="stale")
run_cycle(now=times[2])
fresh = Job.objects.get(pk=job.pk)
assert fresh.pending_reason not in ("", "stale") and fresh.queue_position, fresh.pending_reason
print("exact")
"""


def test_the_snapshot_reads_exactly_and_the_cycle_writes_its_waits_on_sqlite_too(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DJANGO_ALLOW_ASYNC")},
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "GPUPOOL_VAR_DIR": str(tmp_path),
    }

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    migrated = manage("migrate", "--no-input", "-v0")
    assert migrated.returncode == 0, migrated.stderr
    checked = manage("shell", "-c", SQLITE_CHECK)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip().endswith("exact")


def test_the_collector_is_paused_for_the_cycle_and_back_after_an_error():
    import gc

    assert gc.isenabled()
    with pytest.raises(RuntimeError), cycle.collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("the engine failed")
    assert gc.isenabled()


@pytest.mark.django_db
def test_a_queued_job_changed_between_two_loads_reads_as_it_is_now(bob, vision):
    """The load keeps the jobs it built for the next load (``_PendingMemo``); a job whose
    row changed in between must come out rebuilt, never as the last load saw it."""
    job = JobFactory(team=vision, owner=bob, submitted_at=TIMES[0], gpu_models=["t4"])
    untouched = JobFactory(team=vision, owner=bob, submitted_at=TIMES[1])
    config = snapshot.engine_config()

    def pending() -> dict[str, engine.PendingJob]:
        loaded = snapshot.snapshot_load(now=TIMES[3], config=config)
        return {p.id: p for p in loaded.snapshot.pending}

    first = pending()
    Job.objects.filter(pk=job.pk).update(
        gpu_models=["l4", "t4"], priority=first[str(job.public_id)].priority - 1, replicas=2
    )
    second = pending()
    now = second[str(job.public_id)]
    assert now.requirement.models == ("l4", "t4")
    assert now.priority == first[str(job.public_id)].priority - 1
    assert now.replicas == 2
    # The one that did not change is the same object: built once, read twice.
    assert second[str(untouched.public_id)] is first[str(untouched.public_id)]
