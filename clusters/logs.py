"""Job logs: one replica's log for the job page, the API and the CLI, read and downloaded.

A read is a tail, a stretch of seconds, or the lines after a cursor (the last line's
timestamp, handed back as ``next_since``), so a page can follow a log and a CLI tail it. What
a user cannot fix (a job not started, a pod gone) comes back as a message, never an error.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from clusters.clients import ClusterUnavailable, cluster_client
from clusters.kube import KubeClient, KubeError
from clusters.models import VolcanoJobRecord
from portal.errors import ApplicationError, NotFound
from rules import volcano

LOG_TAIL_DEFAULT = 500
LOG_TAIL_MAX = 10_000
LOG_BYTES_MAX = 2 * 1024 * 1024
LOG_SINCE_SLACK_SECONDS = 120
"""A read after a cursor asks the cluster for the last (portal now - cursor + this) seconds:
room for the cluster's clock running ahead of the portal's. A larger skew shows (the cursor's
own line is not in the answer) and is read again by tail instead."""
LOG_ATTEMPTS = ("current", "previous")
"""``previous``: the run before the container last restarted in place, as the kubelet keeps
it (``kubectl logs --previous``)."""

_LOG_TIME = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})")
_LOG_DURATION = re.compile(r"(\d{1,7})([smhd]?)")
_LOG_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def log_time_nanos(text: str) -> int | None:
    """An RFC 3339 time (as kubelets stamp lines, up to nanoseconds) in epoch nanoseconds."""
    match = _LOG_TIME.fullmatch(text)
    if match is None:
        return None
    zone = "+00:00" if match[3] == "Z" else match[3]
    try:
        moment = dt.datetime.fromisoformat(match[1] + zone)
    except ValueError:
        return None
    return int(moment.timestamp()) * 10**9 + int((match[2] or "").ljust(9, "0"))


@dataclass(frozen=True)
class LogSince:
    """Where a read starts: after a line's timestamp (``after``, what ``next_since`` hands
    back), or some seconds ago (``seconds``)."""

    after: str = ""
    seconds: int = 0

    @property
    def after_nanos(self) -> int:
        return log_time_nanos(self.after) or 0


def log_since_parse(value: str) -> LogSince:
    """``since`` as a client writes it: an RFC 3339 time (the lines after it) or a duration
    like ``90s``, ``10m``, ``2h``, ``1d`` (the lines of that last stretch)."""
    text = (value or "").strip()
    if log_time_nanos(text) is not None:
        return LogSince(after=text)
    match = _LOG_DURATION.fullmatch(text.lower())
    if match is None or int(match[1]) == 0:
        raise ApplicationError(
            "since must be an RFC 3339 time or a duration.",
            fields={"since": ["Use a line's timestamp (2025-03-04T10:30:15.123Z) or 10m, 2h."]},
        )
    return LogSince(seconds=int(match[1]) * _LOG_UNITS[match[2]])


@dataclass
class JobLogs:
    """One replica's log (or why there is none), as the job page and the API show it."""

    replica: int
    pod: str
    text: str = ""
    message: str = ""
    available: bool = False
    attempt: str = "current"
    lines: list[tuple[str, str]] = field(default_factory=list)
    """(timestamp, text) per line, oldest first."""
    next_since: str = ""
    """The last line's timestamp (or the ``since`` read after, when nothing came): read
    ``since`` it for only what comes next."""
    running: bool = False
    """The job has not ended: more lines may come."""


def _log_lines(raw: str) -> list[tuple[str, str]]:
    """``TIMESTAMP text`` lines as (timestamp, text); a line cut by the byte limit is dropped
    (the next read starts after the last whole one)."""
    parts = raw.split("\n")
    cut = parts[-1] != "" and len(raw.encode()) >= LOG_BYTES_MAX
    if parts[-1] == "" or cut:
        parts.pop()
    out = []
    for line in parts:
        stamp, _, text = line.partition(" ")
        out.append((stamp, text) if log_time_nanos(stamp) is not None else ("", line))
    return out


def _read_log(
    client: KubeClient,
    namespace: str,
    pod: str,
    *,
    tail: int | None,
    previous: bool,
    since: LogSince | None,
) -> list[tuple[str, str]]:
    """The lines to show, always read with timestamps (the cursor of the next read)."""
    read = functools.partial(
        client.read_pod_log,
        namespace,
        pod,
        timestamps=True,
        previous=previous,
        limit_bytes=LOG_BYTES_MAX,
    )
    if since is None:
        return _log_lines(read(tail_lines=tail))
    if since.seconds:
        return _log_lines(read(tail_lines=tail, since_seconds=since.seconds))
    after = since.after_nanos
    behind = after / 1e9 - time.time()
    lines = _log_lines(
        read(
            tail_lines=LOG_TAIL_MAX,
            since_seconds=max(1, math.ceil(LOG_SINCE_SLACK_SECONDS - behind)),
        )
    )
    # The answer starts at or before the cursor's own line only if nothing between it and
    # the answer's first line was left out (the cluster's clock ahead, or a restart).
    if not any(0 < (log_time_nanos(stamp) or 0) <= after for stamp, _ in lines):
        lines = _log_lines(read(tail_lines=LOG_TAIL_MAX))
    return [line for line in lines if (log_time_nanos(line[0]) or 0) > after]


def replica_restarted(job: Any, replica: int) -> bool:
    """Whether the watch saw replica ``replica``'s containers restart in place (its record's
    pod entry counts them): only then has the kubelet a previous run's log to give."""
    pods = (
        VolcanoJobRecord.objects.filter(job_id=job.pk).values_list("pods", flat=True).first() or {}
    )
    entry = pods.get(str(replica)) or {}
    return int(entry.get("restarts") or 0) > 0


def job_logs(
    *,
    job: Any,
    replica: int = 0,
    tail: int | None = LOG_TAIL_DEFAULT,
    attempt: str = "current",
    since: LogSince | None = None,
    timestamps: bool = False,
) -> JobLogs:
    """One replica's main container: its last ``tail`` lines, or with ``since`` the lines
    after a cursor (``next_since`` of the previous read: how the page follows a log and a
    CLI tails it) or of the last so many seconds; ``attempt="previous"`` for the run before
    the container restarted.

    Access is the caller's business (``portal.access.job_get_for_user``). The answer is never
    an exception for things a user cannot fix: a job not started yet, a pod still pulling its
    image, or pods already garbage-collected come back as a message.
    """
    if not 0 <= replica < job.replicas:
        raise ApplicationError(
            f"This job has replicas 0 to {job.replicas - 1}.",
            fields={"replica": [f"Must be between 0 and {job.replicas - 1}."]},
        )
    if attempt not in LOG_ATTEMPTS:
        raise ApplicationError(
            "attempt must be current or previous.",
            fields={"attempt": ["current, or previous (the run before the last restart)."]},
        )
    if tail is not None:
        tail = max(1, min(LOG_TAIL_MAX, tail))
    pod = volcano.pod_of_replica(volcano.job_run_name(job), job.kind, job.replicas, replica)
    logs = JobLogs(
        replica=replica,
        pod=pod,
        attempt=attempt,
        next_since=since.after if since else "",
        running=not job.is_terminal,
    )
    record = VolcanoJobRecord.objects.filter(job_id=job.pk).select_related("cluster").first()
    if record is None or job.cluster_id is None:
        logs.message = "The job has not been started on a cluster yet."
        return logs
    try:
        client = cluster_client(record.cluster)
        logs.lines = _read_log(
            client,
            record.namespace,
            pod,
            tail=tail,
            previous=attempt == "previous",
            since=since,
        )
        logs.available = True
    except ClusterUnavailable as exc:
        logs.message = f"The cluster cannot be reached: {exc}"
    except KubeError as exc:
        logs.message = _log_problem(exc, attempt)
    stamped = [line for line in logs.lines if line[0]]
    if stamped:
        logs.next_since = stamped[-1][0]
    logs.text = "".join(
        (f"{stamp} {text}" if timestamps and stamp else text) + "\n" for stamp, text in logs.lines
    )
    return logs


def _log_problem(exc: KubeError, attempt: str) -> str:
    if exc.not_found:
        return (
            "The pod is gone (finished jobs' pods are removed after a while), "
            "so its log is no longer available."
        )
    if exc.status == 400 and attempt == "previous" and "previous terminated" in exc.message:
        return "The container has not restarted, so there is no previous run."
    if exc.status == 400:
        return f"No log yet: {exc.message.rpartition(': ')[2]}"
    return f"The log could not be read: {exc.message}"


def job_log_download(
    *, job: Any, replica: int = 0, attempt: str = "current", timestamps: bool = False
) -> tuple[str, Iterator[bytes]]:
    """(file name, chunks) of one replica's whole log, for a download.

    Raises ApplicationError (a 400 naming the field) for a bad replica or attempt, and NotFound
    with the reason in words when there is no log to download.
    """
    probe = job_logs(job=job, replica=replica, tail=1, attempt=attempt)
    if not probe.available:
        raise NotFound(probe.message)
    record = VolcanoJobRecord.objects.select_related("cluster").get(job_id=job.pk)
    try:
        chunks = cluster_client(record.cluster).stream_pod_log(
            record.namespace, probe.pod, timestamps=timestamps, previous=attempt == "previous"
        )
    except (ClusterUnavailable, KubeError) as exc:
        raise NotFound(f"The log could not be read: {exc}") from None
    suffix = "-previous" if attempt == "previous" else ""
    name = volcano.label_value(job.name or "job")
    return f"{name}-replica-{replica}{suffix}.log", chunks
