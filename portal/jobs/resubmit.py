"""Resubmit and clone: the request that made a job, to submit again with changes.

``POST /api/v1/jobs/`` with ``from_job`` and the form's "Resubmit…" both start from
:func:`job_request_data`, the job's own request in the API's field names; whatever the
caller gives overrides it, and the result goes through ``job_submit`` like any request.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from django.utils import timezone

from portal.access import AnyUser, job_get_for_user
from portal.errors import NotFound
from portal.jobs.spec import (
    CONSTRAINT_FIELDS,
    DEFAULT_CPU_PER_GPU,
    DEFAULT_MEMORY_GIB_PER_GPU,
    PRIORITY_BY_NAME,
)
from portal.models import Job, JobEvent, SelectionPolicy

PRIORITY_NAMES = {v: k for k, v in PRIORITY_BY_NAME.items()}
FROM_JOB = "from_job"


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def job_request_data(job: Job, *, with_team: bool = True) -> dict[str, Any]:
    """The request, in the REST API's names, that submits ``job`` again.

    CPU and memory are left out when they were the defaults for the job's GPUs, so that a
    resubmit asking for more GPUs gets the defaults for those, not the old absolute figures.
    """
    data: dict[str, Any] = {
        "name": job.name,
        "kind": job.kind,
        "image": job.image,
        "command": list(job.command or []),
        "args": list(job.args or []),
        "env": dict(job.env or {}),
        "env_from_secrets": {k: dict(v) for k, v in (job.env_from_secrets or {}).items()},
        "replicas": job.replicas,
        "gpus_per_replica": job.gpus_per_replica,
        "selection_policy": job.selection_policy,
        "allow_fallback": job.allow_fallback,
        "priority": PRIORITY_NAMES.get(job.priority, "normal"),
        "max_runtime_minutes": max(1, job.max_runtime_seconds // 60),
        "max_retry": job.max_retry,
    }
    if with_team:
        data = {"team": job.team.slug, **data}
    devices = job.gpus_per_replica
    if job.gpu_memory_gib is not None:  # a share: asked in GiB (and %), its defaults one GPU's
        del data["gpus_per_replica"]
        data["gpu_memory_gib"] = job.gpu_memory_gib
        if job.gpu_cores_percent is not None:
            data["gpu_cores_percent"] = job.gpu_cores_percent
        devices = 1
    if job.cpu_millicores != DEFAULT_CPU_PER_GPU * devices * 1000:
        data["cpu_per_replica"] = _number(job.cpu_millicores / 1000)
    if job.memory_mib != DEFAULT_MEMORY_GIB_PER_GPU * devices * 1024:
        data["memory_gib_per_replica"] = _number(round(job.memory_mib / 1024, 3))
    if job.gpu_models:
        data["gpu_models"] = list(job.gpu_models)
    else:
        if job.min_gpu_memory_gib is not None:
            data["min_gpu_memory_gib"] = job.min_gpu_memory_gib
        if job.requires_bf16:
            data["requires_bf16"] = True
        if job.requires_fp8:
            data["requires_fp8"] = True
        if job.min_fp16_tflops is not None:
            data["min_fp16_tflops"] = _number(job.min_fp16_tflops)
    if job.port is not None:
        data["port"] = job.port
    if job.readiness_path:
        data["readiness_path"] = job.readiness_path
    return data


def merge_request(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` on top. A requirement given in the overrides replaces the
    base's whole requirement (a model list drops the constraints and the other way round), so
    a clone never asks for both."""
    merged = dict(base)
    if overrides.get("gpu_models"):
        for name in CONSTRAINT_FIELDS:
            merged.pop(name, None)
    if any(overrides.get(name) not in (None, False) for name in CONSTRAINT_FIELDS):
        merged.pop("gpu_models", None)
        if merged.get("selection_policy") == SelectionPolicy.ORDERED:
            merged.pop("selection_policy")
    merged.update(overrides)
    return merged


def resolve_from_job(*, user: AnyUser, data: Any) -> tuple[Any, Job | None]:
    """A request naming ``from_job``: the job's request with the rest of ``data`` on top,
    and that job.

    Only a job the caller may see can be cloned; any other id reads as not found, naming the
    field. A request without ``from_job`` (or not an object) is returned as it came.
    """
    if not isinstance(data, Mapping) or FROM_JOB not in data:
        return data, None
    overrides = {k: v for k, v in data.items() if k != FROM_JOB}
    try:
        source = job_get_for_user(user, data[FROM_JOB])
    except NotFound:
        raise NotFound(
            "The job to resubmit was not found.",
            fields={FROM_JOB: ["No job with this id among your teams' jobs."]},
        ) from None
    return merge_request(job_request_data(source), overrides), source


def resubmit_note(*, job: Job, source: Job, now: dt.datetime | None = None) -> JobEvent:
    """Write on the new job's timeline which job it was resubmitted from."""
    return JobEvent.objects.create(
        job=job,
        created_at=now or timezone.now(),
        from_state=job.state,
        to_state=job.state,
        reason="Resubmitted",
        message=f"Resubmitted from {source.name} ({source.public_id}).",
    )
