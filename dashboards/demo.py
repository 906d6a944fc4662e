"""The demo's past (``make demo``: ``manage.py seed_demo_history``): a week of finished jobs of
the demo teams, with their timelines, the usage ledger they would have written, their queue
waits, and the hourly team and pool series, so that charts, fair share, usage and start
estimates mean something on the first visit (issue 32). Seeded once; deterministic.

The jobs are ``SUCCEEDED`` (one in ten ``FAILED``), ran on the demo's models without a
cluster of record (the demo cluster is registered when ``run_demo`` starts kubesim), and are
named like the work each team does, so that the estimates learn runtimes per name pattern;
their idempotency key starts with ``demo-history``.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import defaultdict
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from dashboards.models import HourRun, QueueWait, TeamHour
from portal.models import Job, JobEvent, JobKind, JobState, Membership, Role, Team
from scheduling.models import GpuModel, UsageRecord

HISTORY_DAYS = 7
MARK = "demo-history"  # the jobs' label: seeded once
# team slug: (name stem, image, model key, GPUs per replica, typical minutes)
WORK = {
    "vision": (
        ("resnet50-sweep", "nvcr.io/nvidia/pytorch:24.05-py3", "a100-80gb", 4, 95),
        ("vit-finetune", "nvcr.io/nvidia/pytorch:24.05-py3", "v100-32gb", 2, 50),
    ),
    "language": (
        ("llama-lora", "nvcr.io/nvidia/pytorch:24.05-py3", "a100-80gb", 8, 150),
        ("bert-eval", "huggingface/transformers-pytorch-gpu:4.41", "t4", 1, 20),
    ),
    "robotics": (("ppo-walker", "rayproject/ray-ml:2.20.0-gpu", "v100-32gb", 1, 70),),
}
POOL_GPUS = 40  # the demo kubesim's whole GPUs, for the shares of the series


def _hour(t: dt.datetime) -> dt.datetime:
    return t.replace(minute=0, second=0, microsecond=0)


@transaction.atomic
def demo_history_seed(*, now: dt.datetime | None = None, seed: int = 32) -> int:
    """Write the demo's week of history unless it is there; the number of jobs written."""
    if Job.objects.filter(idempotency_key__startswith=MARK).exists():
        return 0
    now = now or timezone.now()
    rng = random.Random(seed)  # noqa: S311 (demo data, not a secret)
    teams = {t.slug: t for t in Team.objects.filter(slug__in=WORK)}
    models = {
        m.key: m
        for m in GpuModel.objects.filter(key__in={w[2] for ws in WORK.values() for w in ws})
    }
    owners: dict[str, list[Any]] = defaultdict(list)
    for m in Membership.objects.filter(team__in=teams.values()).exclude(role=Role.VIEWER):
        owners[m.team.slug].append(get_user_model().objects.get(pk=m.user_id))
    jobs: list[tuple[Job, list[tuple[str, str, dt.datetime, str]]]] = []
    for slug, work in WORK.items():
        team = teams.get(slug)
        if team is None or not owners[slug]:
            continue
        for stem, image, key, gpus, minutes in work:
            model = models.get(key)
            if model is None:
                continue
            for i in range(rng.randint(10, 16)):
                submitted = now - dt.timedelta(minutes=rng.uniform(90, HISTORY_DAYS * 24 * 60))
                wait = dt.timedelta(minutes=rng.lognormvariate(1.8, 0.9))
                run = dt.timedelta(minutes=max(3.0, rng.gauss(minutes, minutes * 0.25)))
                started, finished = submitted + wait, submitted + wait + run
                if finished > now - dt.timedelta(minutes=5):
                    continue
                failed = rng.random() < 0.1
                state = JobState.FAILED if failed else JobState.SUCCEEDED
                job = Job(
                    team=team,
                    owner=rng.choice(owners[slug]),
                    name=f"{stem}-{i:02d}",
                    kind=JobKind.TRAINING,
                    image=image,
                    command=["python", "train.py"],
                    replicas=1,
                    gpus_per_replica=gpus,
                    cpu_millicores=4000 * gpus,
                    memory_mib=16384 * gpus,
                    max_runtime_seconds=int(minutes * 60 * 3),
                    gpu_models=[key],
                    gpu_model=model,
                    state=state,
                    state_changed_at=finished,
                    submitted_at=submitted,
                    admitted_at=started - dt.timedelta(seconds=5),
                    started_at=started,
                    finished_at=finished,
                    usage_accounted_until=finished,  # the ledger rows below are its usage
                    idempotency_key=f"{MARK}#{len(jobs)}",
                )
                end = (
                    ("RUNNING", "FAILED", finished, "Error: exit code 1")
                    if failed
                    else ("RUNNING", "SUCCEEDED", finished, "Completed")
                )
                events = [
                    ("", "QUEUED", submitted, "Submitted"),
                    ("QUEUED", "ADMITTED", started - dt.timedelta(seconds=5), "Admitted"),
                    ("ADMITTED", "SUBMITTED", started - dt.timedelta(seconds=4), "Dispatched"),
                    ("SUBMITTED", "RUNNING", started, "Running"),
                    end,
                ]
                jobs.append((job, events))
    Job.objects.bulk_create([j for j, _ in jobs])
    event_rows: list[JobEvent] = []
    for job, events in jobs:
        for before, after, at, reason in events:
            event_rows.append(
                JobEvent(
                    job=job,
                    created_at=at,
                    from_state=before,
                    to_state=after,
                    reason=reason.split(":")[0].replace(" ", ""),
                    message=reason,
                )
            )
    JobEvent.objects.bulk_create(event_rows)
    running = {e.job_id: e for e in event_rows if e.to_state == JobState.RUNNING}
    QueueWait.objects.bulk_create(
        QueueWait(
            event_id=running[job.pk].pk,
            job=job,
            team=job.team,
            gpu_model=job.gpu_model,
            gpus=job.total_gpus,
            queued_at=job.submitted_at,
            started_at=job.started_at,
            wait_seconds=(job.started_at - job.submitted_at).total_seconds(),
        )
        for job, _ in jobs
    )
    _usage_and_series([j for j, _ in jobs], now)
    return len(jobs)


def _usage_and_series(jobs: list[Job], now: dt.datetime) -> None:
    """The hourly usage ledger and the hourly team and pool series the runs add up to."""
    usage: dict[tuple[int, int, int, dt.datetime], float] = defaultdict(float)
    team_hours: dict[tuple[int, dt.datetime], float] = defaultdict(float)
    cost = {j.gpu_model_id: j.gpu_model.cost_factor for j in jobs}  # type: ignore[union-attr]
    for job in jobs:
        start, end = job.started_at, job.finished_at
        assert start is not None and end is not None
        hour = _hour(start)
        while hour < end:
            overlap = (min(end, hour + dt.timedelta(hours=1)) - max(start, hour)).total_seconds()
            gpu_hours = job.total_gpus * overlap / 3600
            usage[(job.team_id, job.owner_id, job.gpu_model_id, hour)] += gpu_hours  # type: ignore[index]
            team_hours[(job.team_id, hour)] += gpu_hours
            hour += dt.timedelta(hours=1)
    UsageRecord.objects.bulk_create(
        UsageRecord(
            team_id=team,
            user_id=user,
            gpu_model_id=model,
            hour=hour,
            gpu_hours=hours,
            weighted_gpu_hours=hours * cost[model],
        )
        for (team, user, model, hour), hours in usage.items()
    )
    last = _hour(now)  # the current hour is the minute snapshots' to fill
    pool: dict[dt.datetime, float] = defaultdict(float)
    rows = []
    for (team, hour), gpus in team_hours.items():
        if hour >= last:
            continue
        pool[hour] += gpus
        rows.append(
            TeamHour(
                at=hour,
                team_id=team,
                gpus_allocated=gpus,
                gpus_running=gpus,
                gpus_allocated_peak=round(gpus + 0.49),
                allocation_share=gpus / POOL_GPUS,
                share=gpus / POOL_GPUS,
            )
        )
    TeamHour.objects.bulk_create(rows, ignore_conflicts=True)
    HourRun.objects.bulk_create(
        [
            HourRun(
                at=hour, samples=60, gpus_allocated=gpus, gpus_allocated_peak=round(gpus + 0.49)
            )
            for hour, gpus in pool.items()
        ],
        ignore_conflicts=True,
    )
