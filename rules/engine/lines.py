"""A team's line: its pending jobs by priority (highest first), then submit time, then id.

Apart from ``core`` because the forecast keeps its queue in this order between steps.
"""

from __future__ import annotations

from operator import attrgetter

from rules.engine.snapshot import PendingJob

_by_submit = attrgetter("submitted_at", "id")
_by_priority = attrgetter("priority")


def _in_line_order(jobs: list[PendingJob]) -> bool:
    """Whether ``jobs`` already are in line order (cheaper to check than to sort again)."""
    prev = jobs[0]
    for job in jobs[1:]:
        if job.priority != prev.priority:
            if job.priority > prev.priority:
                return False
        elif job.submitted_at != prev.submitted_at:
            if job.submitted_at < prev.submitted_at:
                return False
        elif job.id < prev.id:
            return False
        prev = job
    return True


def line_order(jobs: list[PendingJob]) -> list[PendingJob]:
    """A team's line: priority desc, then submit time, then id.

    Input already in line order (the cycle's ORDER BY gives it for free) is only checked.
    Otherwise C-level sorts: by priority, then each equal-priority run by submit time and id.
    """
    if _in_line_order(jobs):
        return jobs
    jobs.sort(key=_by_priority, reverse=True)  # stable, so equal priorities keep input order
    out: list[PendingJob] = []
    start = 0
    n = len(jobs)
    while start < n:
        p = jobs[start].priority
        end = start + 1
        while end < n and jobs[end].priority == p:
            end += 1
        run = jobs[start:end]
        run.sort(key=_by_submit)
        out.extend(run)
        start = end
    return out
