"""Simulated time: a speed factor over wall time plus manual advances.

Everything that "takes time" in the simulation (container start-up, a job's run time, pod
termination, TTLs) is measured on this clock, never on the wall clock, so that a test can jump
an hour ahead with :meth:`SimClock.advance` and a demo can run at 60x. HTTP-level timeouts
(``timeoutSeconds`` of a watch, a hanging fault) stay in wall time, because the client measures
them that way.
"""

from __future__ import annotations

import functools
import threading
import time
from datetime import UTC, datetime


class SimClock:
    """``now() = start + offset + speed * (monotonic() - t0)``; ``speed=0`` means manual only."""

    def __init__(self, speed: float = 1.0, start: float | None = None) -> None:
        if speed < 0:
            raise ValueError("clock speed must be >= 0")
        self._lock = threading.Lock()
        self._speed = float(speed)
        self._start = time.time() if start is None else float(start)
        self._t0 = time.monotonic()
        self._offset = 0.0

    @property
    def speed(self) -> float:
        """Simulated seconds per wall second."""
        return self._speed

    def set_speed(self, speed: float) -> None:
        """Change the speed without a jump in simulated time."""
        if speed < 0:
            raise ValueError("clock speed must be >= 0")
        with self._lock:
            now = self._now_locked()
            self._speed = float(speed)
            self._t0 = time.monotonic()
            self._offset = now - self._start

    def _now_locked(self) -> float:
        return self._start + self._offset + self._speed * (time.monotonic() - self._t0)

    def now(self) -> float:
        """Current simulated time, in seconds since the epoch."""
        with self._lock:
            return self._now_locked()

    def advance_to(self, target: float) -> None:
        """Move simulated time forward to ``target`` (never backwards)."""
        with self._lock:
            now = self._now_locked()
            if target > now:
                self._offset += target - now

    def wall_seconds_until(self, target: float) -> float | None:
        """Wall seconds until simulated ``target``; None when only an advance can get there."""
        with self._lock:
            delta = target - self._now_locked()
            if delta <= 0:
                return 0.0
            if self._speed == 0:
                return None
            return delta / self._speed


def wall_text(offset: float = 0.0) -> str:
    """The wall clock as an RFC 3339 timestamp, for object metadata.

    Metadata times (creationTimestamp, deletionTimestamp, managedFields, Event timestamps) are
    what ``kubectl`` turns into AGE and "Last Seen" against the reader's own clock, so they
    follow the wall clock whatever the simulated clock's speed; status times (startTime,
    conditions, container states) stay on the simulated clock the portal measures jobs by.
    """
    return rfc3339(time.time() + offset)


def rfc3339(ts: float) -> str:
    """Kubernetes timestamp format (second precision, UTC, ``Z``)."""
    return _rfc3339_second(int(ts))


@functools.lru_cache(maxsize=256)
def _rfc3339_second(second: int) -> str:
    # thousands of objects are stamped within the same second; format each second once
    return datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(ts: float) -> str:
    """MicroTime format, used for ``eventTime`` and log timestamps."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
