"""Multi-row updates of job rows never deadlock: each locks its rows in ascending id order.

Against the real PostgreSQL, with one connection per thread: transactions that update
overlapping sets of job rows, handed their rows in opposite orders, start together (a barrier)
many times over. Before the rows were locked in one order, PostgreSQL killed one of each such
pair for a deadlock in most rounds (``docs/decisions.md``, *One lock order for job rows*).
"""

from __future__ import annotations

import copy
import datetime as dt
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models.base import ModelState
from django.utils import timezone

from portal.jobs.state import Change, jobs_transition_bulk
from portal.models import Job, JobEvent, JobState, JobWait
from scheduling.cycle import Reasons, _write_reasons
from scheduling.estimates import Estimate, estimates_store
from tests.factories import JobFactory, TeamFactory, UserFactory

S = JobState
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="row locks: PostgreSQL only"),
]

ROUNDS = 30
TIME_BOUND = dt.timedelta(seconds=40)
ROWS = 600


def _jobs(n: int, state: JobState) -> list[int]:
    """``n`` fresh jobs in ``state`` (one insert), their ids ascending."""
    template = JobFactory.build(team=TeamFactory(), owner=UserFactory(), state=state)
    built = []
    for i in range(n):
        job = copy.copy(template)
        job._state = ModelState()
        job.public_id, job.name = uuid.uuid4(), f"{template.name}-{i}"
        built.append(job)
    return sorted(j.pk for j in Job.objects.bulk_create(built))


def _race(*work: tuple[Callable[[], Any], float]) -> list[BaseException]:
    """Run each callable in its own thread (and database connection), all released at once
    and each after its own delay in seconds; return what they raised."""
    barrier = threading.Barrier(len(work))
    errors: list[BaseException] = []

    def run(fn: Callable[[], Any], delay: float) -> None:
        try:
            barrier.wait()
            time.sleep(delay)
            fn()
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=item) for item in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a racing transaction never ended"
    return errors


def _rounds() -> Iterator[int]:
    """Round numbers, up to ``ROUNDS`` or ``TIME_BOUND``, whichever comes first."""
    deadline = time.monotonic() + TIME_BOUND.total_seconds()
    for n in range(ROUNDS):
        yield n
        if time.monotonic() > deadline:
            return


def dispatch_batches_round(n: int) -> list[BaseException]:
    """Three dispatch batches (the dispatcher's own call: ADMITTED → SUBMITTED, each in its
    transaction) over overlapping sets of rows, handed ascending, descending and shuffled;
    checks every row ended with exactly one winner and one event, returns what was raised."""
    rng = random.Random(n)  # a shuffle, not a secret
    ids = _jobs(ROWS, S.ADMITTED)
    third = len(ids) // 3
    plans = {
        "up": ids[: 2 * third],
        "down": ids[third:][::-1],
        "mixed": rng.sample(ids[::2], len(ids[::2])),
    }
    won: dict[str, set[int]] = {}

    def batch(who: str, order: list[int]) -> Callable[[], None]:
        def go() -> None:
            with transaction.atomic():
                won[who] = jobs_transition_bulk(
                    changes=[
                        Change(job_id=pk, updates={"volcano_job_name": f"{who}-{pk}"}, message=who)
                        for pk in order
                    ],
                    expected=S.ADMITTED,
                    to=S.SUBMITTED,
                    reason="Submitted",
                )

        return go

    errors = _race(*((batch(who, order), 0.0) for who, order in plans.items()))
    if errors:
        return errors
    winners = [pk for ws in won.values() for pk in ws]
    assert len(winners) == len(set(winners)), "a row was won twice"
    touched = set().union(*map(set, plans.values()))
    assert set(winners) == touched
    names = dict(Job.objects.filter(pk__in=touched).values_list("pk", "volcano_job_name"))
    assert all(names[pk] == f"{who}-{pk}" for who, ws in won.items() for pk in ws)
    events = list(
        JobEvent.objects.filter(job_id__in=touched, to_state=S.SUBMITTED).values_list(
            "job_id", "message"
        )
    )
    assert sorted(pk for pk, _ in events) == sorted(touched), "not one event per row"
    assert all(pk in won[message] for pk, message in events)
    return []


def _estimate_and_cycle(
    n: int, ids: list[int]
) -> tuple[Callable[[], None], Callable[[], None], Callable[[], None]]:
    """The estimate refresh's write of every queued job in ``ids`` (newest first, as the
    refresh reads them), the cycle's persist (admissions, then the pending reasons and
    positions of the jobs left queued, in one transaction), and the check of what they left."""
    admitted = ids[n % 7 :: 7]
    queued = sorted(set(ids) - set(admitted))
    now = timezone.now()
    estimate = Estimate(start=None, model="", cluster="", note=f"round {n}")
    stored: list[int] = []

    def refresh() -> None:
        stored.append(estimates_store({pk: estimate for pk in reversed(ids)}, now=now))

    def persist() -> None:
        with transaction.atomic():
            jobs_transition_bulk(
                changes=[Change(job_id=pk, updates={"node_plan": []}) for pk in admitted],
                expected=S.QUEUED,
                to=S.ADMITTED,
                reason="Admitted",
                now=now,
            )
            rows = [(pk, "Quota", "waits", k, None, "") for k, pk in enumerate(queued)]
            _write_reasons(Reasons(rows=rows, notes={}), now)

    def check() -> None:
        states = set(Job.objects.filter(pk__in=admitted).values_list("state", flat=True))
        assert states == {S.ADMITTED}
        positions = dict(JobWait.objects.filter(job__in=queued).values_list("job", "order_key"))
        assert positions == {pk: k for k, pk in enumerate(queued)}, "a reason was not written"
        written = Job.objects.filter(pk__in=ids, estimate_note=f"round {n}").count()
        assert written == stored[0], "the refresh miscounted what it wrote"

    return refresh, persist, check


def _durations() -> tuple[float, float]:
    """How long the refresh's write and the cycle's persist take alone, on rows of their own."""
    refresh, persist, _ = _estimate_and_cycle(0, _jobs(3 * ROWS, S.QUEUED))
    took = []
    for fn in (refresh, persist):
        t = time.perf_counter()
        fn()
        took.append(time.perf_counter() - t)
    return took[0], took[1]


def estimates_and_cycle_round(n: int, durations: tuple[float, float]) -> list[BaseException]:
    """The refresh's write against the cycle's persist, one started a little after the other:
    over the rounds the offset sweeps the whole of either's duration (``durations``, from
    :func:`_durations`), both ways. Checks every reason was written, and the estimates
    wherever the refresh says it wrote them; returns what was raised."""
    refresh, persist, check = _estimate_and_cycle(n, _jobs(3 * ROWS, S.QUEUED))
    step = n % 10
    offset = durations[0] * step / 10 if n % 2 else -durations[1] * step / 10
    errors = _race((refresh, max(0.0, -offset)), (persist, max(0.0, offset)))
    if not errors:
        check()
    return errors


def test_batch_compare_and_sets_in_opposite_orders_never_deadlock():
    for n in _rounds():
        errors = dispatch_batches_round(n)
        assert not errors, f"round {n}: {errors[0]!r}"


def test_estimate_refresh_and_the_cycles_persist_never_deadlock():
    durations = _durations()
    for n in _rounds():
        errors = estimates_and_cycle_round(n, durations)
        assert not errors, f"round {n}: {errors[0]!r}"
