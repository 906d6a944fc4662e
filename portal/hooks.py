"""Named hand-offs between the rooms: one room fires a hook, another listens, neither imports
the other.

Dependencies run one way (``docs/architecture.md``): the portal core imports no other room,
scheduling does not import clusters. When a lower room must tell a higher one that something
happened, it fires a hook defined here, and the higher room connects its listener in its
``AppConfig.ready()``. A room without listeners (a test settings, a future worker that does not
install ``clusters``) still runs; its work simply waits for the periodic reconcilers.

Every hook calls each listener through ``transaction.on_commit``: after the transaction that
made the change commits (never for one that rolls back, so a listener never sees a row that is
not there), or at once when no transaction is open. Listeners enqueue Celery tasks; they must
be quick and must not raise for a broker outage (the job table is the outbox, see
``clusters.redrive``).

=====================  ==============================  ============================================
hook (arguments)       fired by, when                  listeners (connected in)
=====================  ==============================  ============================================
``jobs_changed()``     ``portal.jobs.services``: a     ``scheduling.tasks.cycle_request``: a
                       submit queued jobs, or a        coalesced cycle (``scheduling/apps.py``)
                       cancel freed a QUEUED one
``job_cancelling``     ``portal.jobs.services.``       ``clusters.tasks.cancel_job_enqueue``:
``(job_id)``           ``job_cancel``: a job that      delete the Volcano Job, then CANCELLED
                       may run is now CANCELLING       (``clusters/apps.py``)
``released()``         ``portal.jobs.state``: a job    ``scheduling.tasks.cycle_request``
                       left its reservation (terminal  (``scheduling/apps.py``)
                       or requeued to QUEUED)
``admitted(ids)``      ``scheduling.cycle.run_cycle``  ``clusters.tasks.dispatch_job_enqueue``:
                       with the jobs it admitted       create the Volcano Jobs
                                                       (``clusters/apps.py``)
``preempted(ids)``     ``scheduling.cycle.run_cycle``  ``clusters.tasks.evict_job_enqueue_many``:
                       with the jobs it preempted      delete their pods, then requeue
                                                       (``clusters/apps.py``)
``over_counted(ids)``  ``scheduling.cycle`` (the       ``clusters.tasks.bindings_refresh_request``:
                       snapshot) with clusters whose   read the pods' real bindings again
                       books over-count a node         (``clusters/apps.py``)
``notifications_``     ``portal.notifications`` (and   ``notifications.outbox.fan_out``: outbox
``created(ids)``       ``notifications.events``): new  rows per channel, then Celery delivers
                       notification rows               (``notifications/apps.py``)
``cluster_``           ``clusters.clients.cluster_``    ``notifications.events.cluster_
``unreachable(id)``    ``unreachable_mark``: a cluster unreachable``: tell the platform
                       that was reachable is not       admins (``notifications/apps.py``)
``quota_changed``      ``scheduling.services.quota_``  ``notifications.events.quota_changed``:
``(change_ids)``       ``set``: the QuotaChange rows   tell the team's members
                       of a team's quota edit          (``notifications/apps.py``)
``cluster_findings``   ``clusters.checkup``: the       ``notifications.events.cluster_
``(id, keys)``         cluster doctor found problems   findings``: tell the platform admins
                       that were not there before      (``notifications/apps.py``)
``estimates_``         ``scheduling.estimates.``       ``dashboards.estimates.estimates_record``:
``refreshed``          ``estimates_refresh``: queued   each job's range, and its first estimate
``(changed, now)``     jobs whose estimate changed     kept for calibration (``dashboards/apps.py``)
=====================  ==============================  ============================================

One hand-off is a question rather than news: a :class:`Question` is answered at once (not on
commit) by the first listener connected, and is None while nobody listens.

=====================  ==============================  ============================================
question (arguments)   asked by, when                  answered by (connected in)
=====================  ==============================  ============================================
``start_estimate``     ``portal.jobs.blocker``: a      ``scheduling.estimates.start_now``: the
``(job, now)``         queued job's page or API        refresh's simulation for this job alone
                       answer, before a refresh has    (``scheduling/apps.py``)
                       stored an estimate on it
``estimate_ranges``    ``portal.jobs.blocker`` and     ``dashboards.estimates.estimate_ranges``:
``(job_pks)``          the queue (page, API): the      the records of ``estimates_record``
                       likely range of a start         (``dashboards/apps.py``)
``dcgm_presence``      ``clusters.checkup``: the       ``dashboards.dcgm.dcgm_presence``: which
``(cluster)``          cluster doctor, where a         nodes have DCGM series in the cluster's
                       Prometheus URL is set           Prometheus (``dashboards/apps.py``)
=====================  ==============================  ============================================

The same table is in ``docs/architecture.md``. This module is Django's ``transaction`` and
the standard library only, so any room can import it.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar

from django.db import transaction

P = ParamSpec("P")
R = TypeVar("R")

__all__ = [
    "Hook",
    "Question",
    "admitted",
    "cluster_findings",
    "cluster_unreachable",
    "dcgm_presence",
    "estimate_ranges",
    "estimates_refreshed",
    "job_cancelling",
    "jobs_changed",
    "notifications_created",
    "over_counted",
    "preempted",
    "quota_changed",
    "released",
    "start_estimate",
]


class Hook(Generic[P]):
    """One named hand-off: listeners connect once, the firing room calls them on commit."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._listeners: list[Callable[P, object]] = []

    def __repr__(self) -> str:
        return f"<Hook {self.name}: {len(self._listeners)} listener(s)>"

    def connect(self, listener: Callable[P, object]) -> None:
        """Add a listener; connecting the same one again (a second ``ready()`` in tests or
        under autoreload) changes nothing."""
        if listener not in self._listeners:
            self._listeners.append(listener)

    def disconnect(self, listener: Callable[P, object]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    @property
    def listeners(self) -> tuple[Callable[P, object], ...]:
        """The listeners in the order they connected (tests call them directly, as the commit
        would)."""
        return tuple(self._listeners)

    def fire_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Call every listener with these arguments once the current transaction commits (at
        once outside one)."""
        for listener in self._listeners:
            transaction.on_commit(functools.partial(listener, *args, **kwargs))


jobs_changed: Hook[[]] = Hook("jobs_changed")
job_cancelling: Hook[[int]] = Hook("job_cancelling")
released: Hook[[]] = Hook("released")
admitted: Hook[[list[int]]] = Hook("admitted")
preempted: Hook[[list[int]]] = Hook("preempted")
over_counted: Hook[[list[int]]] = Hook("over_counted")
notifications_created: Hook[[list[int]]] = Hook("notifications_created")
cluster_unreachable: Hook[[int]] = Hook("cluster_unreachable")
quota_changed: Hook[[list[int]]] = Hook("quota_changed")
cluster_findings: Hook[[int, list[str]]] = Hook("cluster_findings")
estimates_refreshed: Hook[[dict[int, Any], dt.datetime]] = Hook("estimates_refreshed")
"""job pk -> ``scheduling.estimates.Estimate`` of the queued jobs whose estimate changed."""


class Question(Generic[P, R]):
    """A question a lower room asks and a higher room answers, at once: the first listener
    connected answers; None while none is."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._listeners: list[Callable[P, R]] = []

    def __repr__(self) -> str:
        return f"<Question {self.name}: {len(self._listeners)} listener(s)>"

    def connect(self, listener: Callable[P, R]) -> None:
        """Add a listener; connecting the same one again changes nothing."""
        if listener not in self._listeners:
            self._listeners.append(listener)

    def ask(self, *args: P.args, **kwargs: P.kwargs) -> R | None:
        for listener in self._listeners:
            return listener(*args, **kwargs)
        return None


start_estimate: Question[[Any, dt.datetime], Any] = Question("start_estimate")
dcgm_presence: Question[[Any], Any] = Question("dcgm_presence")
estimate_ranges: Question[[list[int]], Any] = Question("estimate_ranges")
"""job pks -> {pk: ``portal.jobs.blocker.StartRange``} of those with a recorded range."""
quota_refusals: Question[[Any], Any] = Question("quota_refusals")
"""(spec, team) pairs → {index: SpecError} for the jobs their team's quota can never admit
(``scheduling.quota_check``); asked by the submit before anything is stored."""
