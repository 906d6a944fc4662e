"""Fault injection: make chosen requests fail, hang, or mangle watch streams — and count it.

The portal's reliability code (retries, backoff, relist on 410, idempotent re-submission on
409) can only be tested if the cluster misbehaves on demand. A :class:`Fault` matches requests
by verb, resource, namespace and name and fires a limited number of times; every firing is
recorded so a test can assert that the path it meant to exercise really ran::

    sim.faults.add(verb="create", resource="jobs", status=500, count=2)
    sim.faults.add(verb="list", resource="pods", status=429, retry_after=1)
    sim.faults.add(verb="get", resource="queues", hang=5.0)
    sim.faults.drop_watch_events(resource="pods", count=1)
    sim.faults.expire_next_watch(resource="jobs")
    assert sim.faults.count(verb="create", resource="jobs") == 2
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

_UNSET: Any = object()

VERBS = frozenset(
    {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"}
)


@dataclass
class Fault:
    """One armed fault. ``count=-1`` fires forever; ``hits`` counts firings."""

    kind: str  # error | hang | drop | duplicate | gone
    verb: str = "*"
    resource: str = "*"
    namespace: str | None = None
    name: str | None = None
    status: int | None = None
    retry_after: int | None = None
    hang: float | None = None
    message: str | None = None
    count: int = 1
    hits: int = 0
    id: int = 0

    def matches_resource(self, plural: str, group: str, subresource: str | None) -> bool:
        """Accept ``pods``, ``pods/log``, ``jobs.batch.volcano.sh`` or ``*``."""
        if self.resource == "*":
            return True
        base, _, sub = self.resource.partition("/")
        if base not in (plural, f"{plural}.{group}" if group else plural):
            return False
        return sub == (subresource or "") if sub or subresource else True

    @property
    def armed(self) -> bool:
        """Whether the fault may still fire."""
        return self.count < 0 or self.hits < self.count


@dataclass(frozen=True)
class FaultRecord:
    """One firing, for assertions and the control endpoint."""

    fault_id: int
    kind: str
    verb: str
    resource: str
    namespace: str | None
    name: str | None
    status: int | None
    at: float


@dataclass
class FaultInjector:
    """The set of armed faults of one server, safe to use from any thread."""

    on_compact: Callable[[], None] | None = None
    _faults: list[Fault] = field(default_factory=list)
    _records: list[FaultRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def _arm(self, fault: Fault) -> Fault:
        if fault.verb not in VERBS:
            raise ValueError(f"unknown verb {fault.verb!r}; use one of {sorted(VERBS)}")
        fault.id = next(self._ids)
        with self._lock:
            self._faults.append(fault)
        return fault

    def add(
        self,
        *,
        verb: str = "*",
        resource: str = "*",
        status: int | object | None = _UNSET,
        count: int = 1,
        retry_after: int | None = None,
        hang: float | None = None,
        namespace: str | None = None,
        name: str | None = None,
        message: str | None = None,
    ) -> Fault:
        """Fail (``status``, default 500) and/or stall (``hang`` wall seconds) requests.

        With ``hang`` and no ``status`` the request is answered normally after the stall,
        which is how a test drives a client past its own timeout; ``count=-1`` never runs out.
        """
        if status is _UNSET:
            status = None if hang is not None else 500  # a bare hang means "slow", not broken
        assert status is None or isinstance(status, int)
        kind = "hang" if status is None else "error"
        return self._arm(
            Fault(
                kind=kind,
                verb=verb,
                resource=resource,
                namespace=namespace,
                name=name,
                status=status,
                retry_after=retry_after,
                hang=hang,
                message=message,
                count=count,
            )
        )

    def drop_watch_events(self, *, resource: str = "*", count: int = 1) -> Fault:
        """Silently skip the next ``count`` watch events of the resource (any watcher)."""
        return self._arm(Fault(kind="drop", verb="watch", resource=resource, count=count))

    def duplicate_watch_events(self, *, resource: str = "*", count: int = 1) -> Fault:
        """Send the next ``count`` watch events twice."""
        return self._arm(Fault(kind="duplicate", verb="watch", resource=resource, count=count))

    def expire_next_watch(self, *, resource: str = "*", count: int = 1) -> Fault:
        """Answer the next ``count`` watch requests with an ERROR event of code 410."""
        return self._arm(Fault(kind="gone", verb="watch", resource=resource, count=count))

    def compact(self) -> None:
        """Expire all watch history now (old versions and continue tokens answer 410)."""
        if self.on_compact is not None:
            self.on_compact()
        with self._lock:
            self._records.append(FaultRecord(0, "compact", "*", "*", None, None, 410, time.time()))

    def take(
        self,
        kinds: tuple[str, ...],
        verb: str,
        plural: str,
        group: str,
        subresource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> Fault | None:
        """Consume and record the first armed fault of ``kinds`` that matches the request."""
        if not self._faults:  # fast path: most servers never arm a fault
            return None
        with self._lock:
            for fault in self._faults:
                if (
                    fault.kind in kinds
                    and fault.armed
                    and fault.verb in ("*", verb)
                    and fault.matches_resource(plural, group, subresource)
                    and fault.namespace in (None, namespace)
                    and fault.name in (None, name)
                ):
                    fault.hits += 1
                    resource = f"{plural}/{subresource}" if subresource else plural
                    self._records.append(
                        FaultRecord(
                            fault.id,
                            fault.kind,
                            verb,
                            resource,
                            namespace,
                            name,
                            fault.status,
                            time.time(),
                        )
                    )
                    return fault
        return None

    def count(
        self, *, verb: str | None = None, resource: str | None = None, kind: str | None = None
    ) -> int:
        """How many injected faults fired, optionally filtered."""
        with self._lock:
            return sum(
                1
                for r in self._records
                if (verb is None or r.verb == verb)
                and (
                    resource is None
                    or r.resource == resource
                    or r.resource.split("/")[0] == resource
                )
                and (kind is None or r.kind == kind)
            )

    def records(self) -> list[dict[str, Any]]:
        """Every firing so far, as dicts (also served by the control endpoint)."""
        with self._lock:
            return [asdict(r) for r in self._records]

    def armed(self) -> list[dict[str, Any]]:
        """Faults that can still fire."""
        with self._lock:
            return [asdict(f) for f in self._faults if f.armed]

    def clear(self) -> None:
        """Disarm every fault and forget the records."""
        with self._lock:
            self._faults.clear()
            self._records.clear()
