"""List + watch of Volcano Jobs and pods, per cluster, as a long-running process.

``manage.py watch_clusters`` runs one :class:`ResourceWatcher` thread per (cluster, resource)
for every cluster that is not disabled. A watcher:

1. takes the lease of its :class:`~clusters.models.ClusterWatch` row (a compare-and-set, so
   a second watcher process, e.g. during a rolling deploy, waits instead of doubling work);
2. *lists* and catches up (applies every listed object, and ends the followed jobs whose
   Volcano Job is gone) when it has no stored resourceVersion (a first start, a ``410 Gone``,
   a predecessor that stopped holding events it could not apply yet), when it takes the
   stream over from a watcher whose lease lapsed (a process killed: the events it kept in
   memory are past its saved version, and no replay brings them back), and when its own
   watch stayed broken for as long as a lease (an API server frozen, restarted or
   compacted meanwhile);
3. watches from the list's version (or, resuming after a short break or a watch the server
   simply closed, from the saved one), applying each event as it comes and saving the version
   (and renewing the lease) every few seconds.

The catch-up applies each listed object exactly as a watch event (``job_status_apply``,
``pods_apply``, hence ``node_plans_apply``), its job read when it is applied: so the state
only moves forward, and a job admitted while the list ran is not skipped, as it would be by
filtering the list through jobs read before it (the reconcile does, and sees it 30 s later;
a watch that then starts from the list's version would never see it).

Events are an optimization: the periodic reconcile (``clusters.reconcile``)
stays the truth. Pod events are filtered in memory first (a pod whose node and facts did not
change costs no query), because a busy cluster sends many status updates per pod.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import random
import socket
import threading
import time
import uuid
from typing import Any

from django.db import close_old_connections, connection
from django.db.models import F
from django.utils import timezone

from clusters.clients import ClusterUnavailable, cluster_client
from clusters.kube import KubeClient, KubeError, WatchEvent
from clusters.models import Cluster, ClusterState, ClusterWatch
from clusters.node_failure import node_failure_requeue, node_rows_mark
from clusters.nodes import node_ready, node_schedulable, node_trouble
from clusters.observed import job_view, pod_view
from clusters.reconcile import followed_jobs
from clusters.status import job_status_apply, pods_apply
from clusters.tasks import evict_job_enqueue_many, sync_inventory_enqueue
from portal.logs import log_context
from portal.models import Job, JobState
from rules import volcano

log = logging.getLogger(__name__)

__all__ = ["ResourceWatcher", "WatchSupervisor", "watch_lease_take"]

# Nodes too: a node that fails under a job moves the job within a second
# (``clusters.node_failure``), where the inventory's sync would take up to a minute.
RESOURCES = ("jobs", "pods", "nodes")
# A lease is renewed every RENEW_EVERY_SECONDS by the supervisor of a live watcher process, so
# one whose process died is taken over this long after its last renewal at most.
LEASE_SECONDS = 6
RENEW_EVERY_SECONDS = 2.0
SAVE_EVERY_SECONDS = 2.0
# Events of a Volcano Job whose job is still ADMITTED (the dispatch has not committed yet) are
# kept and applied once it has, at most this long.
EARLY_KEPT_SECONDS = 120.0


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def watch_lease_take(*, cluster_id: int, resource: str, holder: str) -> ClusterWatch | None:
    """The watch row if ``holder`` now holds its lease (taken or renewed), else None.

    The row's ``taken_over`` (not a field) says whether the lease was taken from a holder whose
    lease had lapsed (a watcher killed, or one that stopped renewing), which may have seen
    events past its saved version that it never applied."""
    ClusterWatch.objects.get_or_create(cluster_id=cluster_id, resource=resource)
    now = timezone.now()
    rows = ClusterWatch.objects.filter(cluster_id=cluster_id, resource=resource)
    before = rows.values_list("holder", "lease_expires_at").first()
    free = rows.filter(models_q_lease_free(holder, now))
    if not free.update(holder=holder, lease_expires_at=now + dt.timedelta(seconds=LEASE_SECONDS)):
        return None
    row = ClusterWatch.objects.get(cluster_id=cluster_id, resource=resource)
    # Won over a lease that was neither released nor ours and live: it had lapsed.
    previous, expires = before or ("", None)
    row.taken_over = bool(previous) and (previous != holder or expires is None or expires < now)
    return row


def models_q_lease_free(holder: str, now: dt.datetime) -> Any:
    from django.db.models import Q

    return Q(holder=holder) | Q(holder="") | Q(lease_expires_at__lt=now) | Q(lease_expires_at=None)


def watch_lease_release(
    *, cluster_id: int, resource: str, holder: str, forget_version: bool = False
) -> None:
    """Give the lease back; ``forget_version``: the watcher saw events past its saved version
    that it could not apply yet, so its successor lists instead of resuming."""
    extra = {"resource_version": ""} if forget_version else {}
    ClusterWatch.objects.filter(cluster_id=cluster_id, resource=resource, holder=holder).update(
        holder="", lease_expires_at=None, **extra
    )


class ResourceWatcher:
    """Follows one resource (``jobs`` or ``pods``) of one cluster until ``stop`` is set."""

    def __init__(
        self,
        *,
        cluster_id: int,
        resource: str,
        stop: threading.Event,
        holder: str | None = None,
        watch_timeout: int = 60,
    ) -> None:
        if resource not in RESOURCES:
            raise ValueError(f"cannot watch {resource!r}")
        self.cluster_id = cluster_id
        self.resource = resource
        self.stop = stop
        self.holder = holder or default_holder()
        self.watch_timeout = watch_timeout
        self.client: KubeClient | None = None
        self.events = 0
        self.relists = 0  # lists forced by a 410
        self.lists = 0  # every list: first starts, takeovers and catch-ups included
        # When the stream last told us something (an event, a bookmark, a list), and whether
        # the last attempt to follow it failed: a watch broken for as long as a lease catches
        # up with a list on resume, as a takeover does.
        self._heard_at = time.monotonic()
        self._broken = False
        # A catch-up is owed (a takeover, a long break) until a list has succeeded.
        self._behind = False
        self._pods_seen: dict[str, tuple[str, frozenset[str]]] = {}
        # Node name → (trouble, schedulable): a node's heartbeats change nothing we act on.
        self._nodes_seen: dict[str, tuple[str, bool]] = {}
        # Events that came before their job was recorded SUBMITTED: the latest per job (Volcano
        # Jobs) or per pod (a pod's facts, e.g. Unschedulable, may never change again).
        self._early: dict[uuid.UUID | str, tuple[float, WatchEvent]] = {}
        self._early_lock = threading.Lock()

    def abort(self) -> None:
        """Stop now: set the flag and end the open watch request (for shutdown)."""
        self.stop.set()
        if self.client is not None:
            self.client.abort_streams()

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        # Every line this thread logs names its cluster (``portal.logs``; a thread starts
        # with a context of its own).
        with log_context(cluster=self.cluster_id):
            self._loop()

    def _loop(self) -> None:
        failures = 0
        try:
            while not self.stop.is_set():
                try:
                    self._run_once()
                    failures = 0
                except (KubeError, ClusterUnavailable) as exc:
                    if self.stop.is_set():
                        break  # the error is our own abort
                    self._broken = True
                    failures += 1
                    pause = min(30.0, 0.5 * 2**failures) * random.uniform(0.5, 1.0)  # noqa: S311
                    log.warning(
                        "watch %s/%s: %s; again in %.1f s",
                        self.cluster_id,
                        self.resource,
                        exc.message if isinstance(exc, KubeError) else exc,
                        pause,
                    )
                    self.stop.wait(pause)
                except Exception:
                    log.exception("watch %s/%s crashed; restarting", self.cluster_id, self.resource)
                    self.stop.wait(5)
                finally:
                    close_old_connections()
        finally:
            watch_lease_release(
                cluster_id=self.cluster_id,
                resource=self.resource,
                holder=self.holder,
                forget_version=bool(self._early),
            )
            connection.close()

    def _run_once(self) -> None:
        row = watch_lease_take(
            cluster_id=self.cluster_id, resource=self.resource, holder=self.holder
        )
        if row is None:  # someone else follows this stream; look again when the lease may end
            self.stop.wait(LEASE_SECONDS / 3)
            return
        cluster = Cluster.objects.get(pk=self.cluster_id)
        self.client = cluster_client(cluster)
        version = row.resource_version
        self._behind = self._behind or self._catch_up_due(row)
        if not version or self._behind:
            version = self._relist(cluster)
        self._broken = False
        saved_at = time.monotonic()
        try:
            for event in self.client.watch(
                self.resource,
                label_selector=self._selector(),
                resource_version=version,
                timeout_seconds=self.watch_timeout,
                stop=self.stop,
            ):
                if event.type != "BOOKMARK":
                    self._apply(cluster, event)
                    self.events += 1
                self._heard_at = time.monotonic()
                version = event.resource_version or version
                if time.monotonic() - saved_at > SAVE_EVERY_SECONDS:
                    if not self._save(version):
                        return  # lost the lease
                    saved_at = time.monotonic()
        except KubeError as exc:
            if not exc.gone:
                self._save(version)
                raise
            log.info("watch %s/%s: %s; relisting", cluster.name, self.resource, exc.message)
            self.relists += 1
            ClusterWatch.objects.filter(
                cluster_id=self.cluster_id, resource=self.resource, holder=self.holder
            ).update(resource_version="", relists=F("relists") + 1)
            return
        self._save(version)
        if self.resource != "nodes":
            # The supervisor applies kept early events every second; a watcher run without one
            # (a test's, a one-off) must not keep them until the reconcile.
            self.apply_early()

    def _catch_up_due(self, row: ClusterWatch) -> bool:
        """Whether to list before watching though a version is stored: a replay from it brings
        back only the events the API server still holds, never those a lapsed holder kept in
        memory past it, nor what a server that restarted or lost its history during a long
        break would not report. Nodes carry nothing a watcher keeps back: they just resume."""
        if self.resource == "nodes":
            return False
        if getattr(row, "taken_over", False):
            log.info("watch %s/%s: taken over; listing to catch up", self.cluster_id, self.resource)
            return True
        if self._broken and time.monotonic() - self._heard_at >= LEASE_SECONDS:
            log.info(
                "watch %s/%s: broken for %.0f s; listing to catch up",
                self.cluster_id,
                self.resource,
                time.monotonic() - self._heard_at,
            )
            return True
        return False

    def _save(self, version: str) -> bool:
        now = timezone.now()
        return bool(
            ClusterWatch.objects.filter(
                cluster_id=self.cluster_id, resource=self.resource, holder=self.holder
            ).update(
                resource_version=version,
                lease_expires_at=now + dt.timedelta(seconds=LEASE_SECONDS),
            )
        )

    def _selector(self) -> str:
        """Nodes carry no portal label: their watch follows every node."""
        return "" if self.resource == "nodes" else volcano.managed_selector()

    def _relist(self, cluster: Cluster) -> str:
        """Apply the current state of every object, end the followed jobs whose Volcano Job is
        gone, and return the list's resourceVersion (the watch goes on from there)."""
        assert self.client is not None
        self.lists += 1
        selector = volcano.managed_selector()
        # Read before the list, as the reconcile reads them: a job past ADMITTED by then had
        # its object created earlier still, so one missing from the list really is gone. Only
        # to find those: every listed object is applied below with its job read afresh.
        followed = followed_jobs(cluster) if self.resource == "jobs" else {}
        if self.resource == "nodes":
            items, version = self.client.list_nodes_with_version()
            self._nodes_seen.clear()
        elif self.resource == "jobs":
            items, version = self.client.list_jobs_with_version(label_selector=selector)
        else:
            items, version = self.client.list_pods_with_version(label_selector=selector)
            self._pods_seen.clear()
        for obj in items:
            self._apply(cluster, WatchEvent("ADDED", obj))
        if followed:
            self._vanished_apply(followed, items)
        self._heard_at = time.monotonic()
        self._behind = False
        self._save(version)
        return version

    def _vanished_apply(self, followed: dict[uuid.UUID, Job], items: list[dict[str, Any]]) -> int:
        """End the jobs of ``followed`` (read before the list) whose current run has no listed
        object, as the reconcile does: their DELETED event fell in a gap no watch replays (a
        410, a server that lost its state). Returns how many were looked at."""
        runs: dict[uuid.UUID, set[int | None]] = {}
        for view in map(job_view, items):
            if view is not None:
                runs.setdefault(view.job_uuid, set()).add(view.attempt)
        gone = [
            job
            for job_uuid, job in followed.items()
            if job.state != JobState.ADMITTED
            and not runs.get(job_uuid, set()) & {None, job.attempt_number}
            # A later run listed: the job moved on since it was read, and is not gone.
            and not any(a is not None and a > job.attempt_number for a in runs.get(job_uuid, ()))
        ]
        for job in gone:
            job_status_apply(job=job, view=None, deleted=True)
        return len(gone)

    def apply_early(self) -> int:
        """Apply the kept events of jobs that have left ADMITTED since; returns how many."""
        with self._early_lock:
            kept = list(self._early.items())
        if not kept:
            return 0
        applied = 0
        cluster = Cluster.objects.get(pk=self.cluster_id)
        for key, (seen, event) in kept:
            view = job_view(event.object) if self.resource == "jobs" else pod_view(event.object)
            job = self._job(cluster, view.job_uuid) if view is not None else None
            with self._early_lock:
                if self._early.get(key, (None, None))[1] is not event:
                    continue  # a later event replaced it (or was applied directly)
                if job is not None and job.state == JobState.ADMITTED:
                    if time.monotonic() - seen > EARLY_KEPT_SECONDS:
                        del self._early[key]  # the reconcile takes it from here
                    continue
                del self._early[key]
            if job is None or view is None:
                continue
            if self.resource == "jobs":
                job_status_apply(job=job, view=view, deleted=event.type == "DELETED")
            else:
                self._pod_apply(job, view)
            applied += 1
        return applied

    # -- one event ------------------------------------------------------------------------
    def _job(self, cluster: Cluster, job_uuid: uuid.UUID) -> Job | None:
        return (
            Job.objects.select_related("team", "cluster", "volcano")
            .filter(public_id=job_uuid, cluster_id=cluster.pk)
            .first()
        )

    def _apply_node(self, cluster: Cluster, event: WatchEvent) -> None:
        """A node's health onto its inventory rows, and its jobs off it when it is in trouble
        (``clusters.node_failure``); only when what we act on changed."""
        node = event.object
        name = str((node.get("metadata") or {}).get("name") or "")
        if not name:
            return
        if event.type == "DELETED":
            trouble, schedulable = "was deleted", False
        else:
            trouble = node_trouble(node, tolerate_gpu_taint=cluster.tolerate_gpu_taint)
            schedulable = node_schedulable(node, tolerate_gpu_taint=cluster.tolerate_gpu_taint)
        previous = self._nodes_seen.get(name)
        if previous == (trouble, schedulable):
            return
        self._nodes_seen[name] = (trouble, schedulable)
        # Out of trouble since this watch last saw it (a node recovers in steps: Ready first,
        # the unreachable taint gone a few seconds later; the last step counts). One that came
        # back while no watch ran is the minute's inventory sync's.
        back = not trouble and previous is not None and bool(previous[0])
        node_rows_mark(
            cluster=cluster,
            name=name,
            ready=event.type != "DELETED" and node_ready(node),
            schedulable=schedulable,
            taints=list((node.get("spec") or {}).get("taints") or []),
        )
        if trouble:
            evict_job_enqueue_many(node_failure_requeue(cluster=cluster, troubled={name: trouble}))
        elif back:
            # Back from the dead: pods of runs stopped without them may still hold its GPUs
            # until its kubelet stops them; the inventory counts them before a cycle offers
            # the GPUs (``clusters.foreign_use.portal_pods_left_behind``).
            sync_inventory_enqueue(cluster.pk)

    def _apply(self, cluster: Cluster, event: WatchEvent) -> None:
        if self.resource == "nodes":
            self._apply_node(cluster, event)
            return
        if self.resource == "jobs":
            view = job_view(event.object)
            if view is None:
                return
            job = self._job(cluster, view.job_uuid)
            if job is None or view.attempt not in (None, job.attempt_number):
                # An earlier run's object (deleted, held by pods Terminating on a dead node):
                # its events must not stand in for, or be kept instead of, the current run's.
                return
            with self._early_lock:
                if job.state == JobState.ADMITTED:
                    # The create returned but its dispatch has not recorded SUBMITTED yet (a
                    # short job may even have finished): apply this once the record allows.
                    self._early[view.job_uuid] = (time.monotonic(), event)
                    return
                self._early.pop(view.job_uuid, None)
            job_status_apply(job=job, view=view, deleted=event.type == "DELETED")
            return
        pod = pod_view(event.object)
        if pod is None:
            return
        if event.type == "DELETED":
            self._pods_seen.pop(pod.uid, None)
            with self._early_lock:
                self._early.pop(pod.uid, None)
            return
        if self._pods_seen.get(pod.uid) == self._pod_signature(pod):
            return
        job = self._job(cluster, pod.job_uuid)
        if job is None:
            return
        with self._early_lock:
            if job.state == JobState.ADMITTED:
                # Before SUBMITTED only the binding is taken (no record to hold facts yet);
                # the facts are applied once the record is written, for a pod may never
                # send another event (one Unschedulable stays so).
                self._early[pod.uid] = (time.monotonic(), event)
            else:
                self._early.pop(pod.uid, None)
        self._pod_apply(job, pod)

    @staticmethod
    def _pod_signature(pod: Any) -> tuple[str, frozenset[str], bool, int]:
        # Readiness counts: it is what an inference job's endpoint waits for; restarts are
        # what makes a previous run's log worth offering.
        return (pod.node, frozenset(f.key for f in pod.facts), pod.ready, pod.restarts)

    def _pod_apply(self, job: Job, pod: Any) -> None:
        pods_apply(job=job, pods=[pod])
        if job.state != JobState.ADMITTED:
            self._pods_seen[pod.uid] = self._pod_signature(pod)
        if len(self._pods_seen) > 100_000:
            self._pods_seen.clear()


class WatchSupervisor:
    """Keeps one watcher thread per (cluster, resource) for clusters that are not disabled."""

    def __init__(self, *, stop: threading.Event, refresh_seconds: float = 15.0) -> None:
        self.stop = stop
        self.refresh_seconds = refresh_seconds
        self.holder = default_holder()
        self.threads: dict[tuple[int, str], tuple[threading.Thread, threading.Event]] = {}
        self.watchers: dict[tuple[int, str], ResourceWatcher] = {}

    def wanted(self) -> set[int]:
        return set(
            Cluster.objects.exclude(state=ClusterState.DISABLED).values_list("pk", flat=True)
        )

    def refresh(self) -> None:
        wanted = self.wanted()
        for (pk, resource), (thread, stop) in list(self.threads.items()):
            if pk not in wanted or not thread.is_alive():
                stop.set()
                del self.threads[(pk, resource)]
                self.watchers.pop((pk, resource)).abort()
        for pk in wanted:
            for resource in RESOURCES:
                if (pk, resource) in self.threads:
                    continue
                stop = threading.Event()
                watcher = ResourceWatcher(
                    cluster_id=pk, resource=resource, stop=stop, holder=self.holder
                )
                thread = threading.Thread(
                    target=watcher.run, name=f"watch-{pk}-{resource}", daemon=True
                )
                thread.start()
                self.threads[(pk, resource)] = (thread, stop)
                self.watchers[(pk, resource)] = watcher

    def renew(self) -> None:
        """Extend the leases of the streams this process follows (live threads only: a
        watcher that crashed must not keep its stream from another process)."""
        now = timezone.now()
        for (pk, resource), (thread, _stop) in list(self.threads.items()):
            if thread.is_alive():
                ClusterWatch.objects.filter(
                    cluster_id=pk, resource=resource, holder=self.holder
                ).update(lease_expires_at=now + dt.timedelta(seconds=LEASE_SECONDS))

    def apply_early(self) -> None:
        for (_pk, resource), watcher in list(self.watchers.items()):
            if resource != "nodes":
                watcher.apply_early()

    def run(self) -> None:
        refreshed = renewed = -1e9
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                try:
                    if now - refreshed >= self.refresh_seconds:
                        self.refresh()
                        refreshed = now
                    if now - renewed >= RENEW_EVERY_SECONDS:
                        self.renew()
                        renewed = now
                    self.apply_early()
                except Exception:
                    log.exception("watch supervisor: refresh failed")
                finally:
                    close_old_connections()
                self.stop.wait(1.0)
        finally:
            for _thread, stop in self.threads.values():
                stop.set()
            for watcher in self.watchers.values():
                watcher.abort()
            for thread, _ in self.threads.values():
                thread.join(timeout=self.refresh_seconds)
            connection.close()
