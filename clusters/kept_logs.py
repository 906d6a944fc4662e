"""Logs that outlive their pods: the portal reads each replica's last lines just before it
deletes a job's pods (a cancel, a preemption, a requeue), and keeps them with the attempt.

A cluster forgets a deleted pod's log at once, so an attempt that was preempted would
otherwise leave nothing to read. Only the portal's own deletes are covered: pods a cluster
restarts by itself (a gang restart after an eviction) or deletes behind the portal's back
take their logs with them.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from clusters.logs import job_logs
from portal.models import AttemptLog, Job
from rules import volcano

KEPT_LOG_LINES = 500
KEPT_LOG_REPLICAS = 16  # a 512-replica gang keeps its first 16; the rest say so
UNREACHABLE = "The cluster cannot be reached"


def job_logs_keep(*, job: Job, now: dt.datetime | None = None) -> int:
    """Keep the current attempt's logs, once; returns how many replicas were read.

    Called before every delete attempt; the second and later calls find the rows and do
    nothing. A job that never started has nothing to keep.
    """
    if job.started_at is None or job.cluster_id is None:
        return 0
    number = job.attempt_number
    if AttemptLog.objects.filter(job_id=job.pk, attempt=number).exists():
        return 0
    now = now or timezone.now()
    rows = []
    unreachable = ""
    for replica in range(min(job.replicas, KEPT_LOG_REPLICAS)):
        if unreachable:  # one timeout is enough: the others would wait as long for nothing
            rows.append(_row(job, number, replica, "", unreachable, now))
            continue
        logs = job_logs(job=job, replica=replica, tail=KEPT_LOG_LINES)
        if not logs.available and logs.message.startswith(UNREACHABLE):
            unreachable = logs.message
        message = "" if logs.available else logs.message
        rows.append(_row(job, number, replica, logs.text, message, now))
    AttemptLog.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def _row(
    job: Job, number: int, replica: int, text: str, message: str, now: dt.datetime
) -> AttemptLog:
    return AttemptLog(
        job=job,
        attempt=number,
        replica=replica,
        pod=volcano.pod_of_replica(volcano.job_run_name(job), job.kind, job.replicas, replica),
        text=text,
        message=message,
        captured_at=now,
    )
