"""The simulation's time and loop: timers on the simulated clock, and the bounded step that
fires due timers, reconciles dirty jobs, runs one scheduling cycle and publishes queue status,
then releases the store's lock so API requests are never starved. Run by a thread
(:meth:`SimLoop.start`) or stepped by hand (:meth:`SimLoop.settle`, :meth:`SimLoop.advance`).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubesim.clock import rfc3339
from kubesim.runtime import (
    API_BUSY_SECONDS,
    QUEUE_PUBLISH_SECONDS,
    QUEUE_QUIET_SECONDS,
    STEP_SECONDS,
    STEP_SECONDS_UNDER_LOAD,
)

log = logging.getLogger("kubesim")


class SimLoop:
    """Time and loop methods of :class:`kubesim.sim.Simulation`.

    A mixin: every attribute it uses is set in ``Simulation.__init__``.
    """

    def now(self) -> float:
        """Current simulated time (constant within one step, so a step is one instant)."""
        frozen = self._step_now
        return frozen if frozen is not None else self.clock.now()

    def now_text(self) -> str:
        """Current simulated time as an RFC 3339 timestamp."""
        return rfc3339(self.now())

    def at(self, due: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` at simulated time ``due`` (under the lock)."""
        heapq.heappush(self._timers, (due, next(self._seq), fn, args))
        self.wake.set()

    def after(self, seconds: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` ``seconds`` of simulated time from now."""
        self.at(self.now() + max(seconds, 0.0), fn, *args)

    def has_work(self) -> bool:
        """Whether a zero-time step would do something."""
        return bool(
            self.dirty_jobs
            or (self.dirty_queues and self._queue_publish_due())
            or (self.sched_dirty and self.gangs)
            or (self._timers and self._timers[0][0] <= self.now())
            or self.ns_dirty
            or self.pending_commands
            or self.closing_queues
        )

    def step(self, slice_seconds: float = STEP_SECONDS) -> bool:
        """Do one bounded batch of work; returns True when more is pending right now."""
        started = time.thread_time()
        with self.lock:
            self.stats.steps += 1
            now = self._step_now = self.clock.now()
            try:
                self._step_once(now, slice_seconds)
            finally:
                self._step_now = None
            more = self.has_work()
        self.stats.step_seconds += time.thread_time() - started
        return more

    def _step_once(self, now: float, slice_seconds: float) -> None:
        """Timers due by ``now``, dirty jobs, one scheduling cycle, namespaces, queues.

        Each phase stops when the step's time slice is used up and leaves the rest for the
        next step, so an API request never waits behind more than a few milliseconds of
        simulation (20,000 pods are created and bound in many small steps, not one).
        """
        deadline = time.perf_counter() + slice_seconds
        fired = 0
        while self._timers and self._timers[0][0] <= now:
            _, _, fn, args = heapq.heappop(self._timers)
            fn(*args)
            fired += 1
            if fired % 64 == 0 and time.perf_counter() > deadline:
                break
        self.stats.timers_fired += fired
        if self.pending_commands:
            self._run_commands()
        for _ in range(2):  # a reconcile may create pods that the scheduler then binds
            while self.dirty_jobs and time.perf_counter() <= deadline:
                key = next(iter(self.dirty_jobs))
                del self.dirty_jobs[key]
                job = self.jobs.get(key)
                if job is not None:
                    self._reconcile_job(job)
            if self.sched_dirty and self.gangs:
                self._schedule(deadline)
        if self.ns_dirty:
            self.ns_dirty = False
            self._namespace_gc()
        if self.closing_queues:
            self._sync_closing_queues()
        if self.dirty_queues and self._queue_publish_due():
            self._next_queue_publish = time.monotonic() + QUEUE_PUBLISH_SECONDS
            self._publish_queues()

    def _queue_publish_due(self) -> bool:
        """Queue status is a summary counted over every job: publish it at once when all is
        quiet (or ``settle`` asks), else at most every ``QUEUE_PUBLISH_SECONDS``, as Volcano's
        queue controller updates it behind its work queue. Under a stream of creates the
        simulation is quiet between two bursts, and publishing in each of those gaps made the
        counting grow with the square of the jobs created."""
        if time.monotonic() >= self._next_queue_publish:
            return True
        if self.dirty_jobs or (self.sched_dirty and self.gangs):
            return False
        return self._settling or time.monotonic() - self.last_api_request >= QUEUE_QUIET_SECONDS

    def settle(self, max_steps: int = 100_000) -> None:
        """Run zero-time work until nothing is left (timers in the future stay pending)."""
        with self.lock:
            self._settling = True
            try:
                for _ in range(max_steps):
                    if not self.step():
                        return
            finally:
                self._settling = False
        log.warning("kubesim: settle() gave up after %d steps", max_steps)

    def advance(self, seconds: float) -> None:
        """Jump simulated time forward, firing every timer in order on the way."""
        with self.lock:
            target = self.now() + seconds
            self.settle()
            while self._timers and self._timers[0][0] <= target:
                self.clock.advance_to(self._timers[0][0])
                self.settle()
            self.clock.advance_to(target)
            self.settle()

    def start(self) -> None:
        """Run the loop in a daemon thread."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kubesim-sim", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop thread."""
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def pause(self) -> None:
        """Stop the background loop from doing work (API requests are still answered).

        Explicit :meth:`settle` and :meth:`advance` calls still run; only the loop waits.
        """
        self._paused.set()

    def resume(self) -> None:
        """Let the background loop work again."""
        self._paused.clear()
        self.wake.set()

    @property
    def paused(self) -> bool:
        """Whether the background loop is paused."""
        return self._paused.is_set()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._paused.is_set():
                self.wake.wait(0.05)
                self.wake.clear()
                continue
            # API requests go first: while any is in flight the simulation waits (at most
            # 50 ms), like a controller whose informer lags a busy apiserver. Bursts of
            # creates are then answered at API speed and the simulation catches up after.
            waited = 0
            while self.api_inflight > 0 and waited < 50:
                time.sleep(0.001)
                waited += 1
            # While requests keep arriving, work in 1 ms slices so that the next one waits
            # at most about that long for the lock; otherwise use the normal slice.
            recent = time.monotonic() - self.last_api_request < API_BUSY_SECONDS
            try:
                more = self.step(STEP_SECONDS_UNDER_LOAD if recent else STEP_SECONDS)
            except Exception:  # a bug must not kill the cluster; it is logged loudly
                log.exception("kubesim: simulation step failed")
                more = False
            if more:
                time.sleep(0)  # let API threads take the lock between batches
                continue
            with self.lock:
                wait = self.clock.wall_seconds_until(self._timers[0][0]) if self._timers else None
                if self.dirty_queues:  # a deferred queue status is due soon
                    idle_at = self.last_api_request + QUEUE_QUIET_SECONDS
                    due = min(self._next_queue_publish, idle_at) - time.monotonic()
                    until = max(due, API_BUSY_SECONDS)
                    wait = until if wait is None else min(wait, until)
            self.wake.wait(0.5 if wait is None else min(max(wait, 0.0005), 0.5))
            self.wake.clear()
