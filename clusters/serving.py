"""An inference job's endpoint: its Service (and Ingress) on the cluster, and its readiness.

An inference job with a port gets, next to its Volcano Job, a ClusterIP Service named
``<job>-serve`` on that port and, on a cluster whose admin chose ingress exposure, an Ingress
on the host the cluster's pattern gives it (``rules.volcano`` builds both, purely). Both
carry an owner reference to the Volcano Job, so a cluster's garbage collector removes them with
it; the portal also deletes them itself when the job ends, is cancelled or is preempted, since
an ended Volcano Job stays (for its logs) until its TTL.

The endpoint is written on the job (``endpoint_url``, ``endpoint_kind``) once the objects
exist, and ``endpoint_ready`` follows the pods' ``Ready`` conditions as the watch and the
reconcile see them (``clusters.status.pods_apply`` calls :func:`endpoint_ready_apply`). The
portal shows a job as serving while it is RUNNING and ready (``Job.serving``).

Creating is idempotent: the names are the job's, so ``409 AlreadyExists`` means an earlier
attempt made them. A create that fails is not a dispatch failure (the job runs; only its
endpoint is late): it is recorded on the job's timeline and :func:`serving_reconcile`, run with
every cluster reconcile, tries again for running jobs that still have no endpoint, and deletes
the objects of jobs that no longer run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from clusters.clients import ClusterUnavailable, cluster_client, cluster_job_namespace
from clusters.kube import KubeClient, KubeError, ProxyAnswer
from clusters.models import Cluster, ServingExposure, VolcanoJobRecord
from clusters.outcome import job_event_record
from portal.errors import ApplicationError, Conflict
from portal.models import TERMINAL_STATES, Job, JobKind, JobState
from rules import volcano

log = logging.getLogger(__name__)

__all__ = [
    "endpoint_ready_apply",
    "job_proxy",
    "serving_expose",
    "serving_reconcile",
    "serving_spec",
    "serving_withdraw",
]

S = JobState
# States in which a job's pods may exist, so its endpoint should.
EXPOSED_STATES = frozenset({S.SUBMITTED, S.RUNNING})


def serving_spec(
    job: Job, namespace: str, owner_uid: str | None = None, volcano_name: str | None = None
) -> volcano.ServingSpec:
    """The Service and Ingress input for ``job`` on its cluster (ManifestError if impossible:
    e.g. a host pattern that no longer gives a valid host). ``volcano_name``: the Volcano Job
    of the run it serves, as created (default: the current run's own name)."""
    cluster = job.cluster
    assert cluster is not None and job.port is not None
    host = None
    if cluster.serving_exposure == ServingExposure.INGRESS and cluster.ingress_host_pattern:
        host = volcano.ingress_host(cluster.ingress_host_pattern, str(job.public_id), job.team.slug)
    return volcano.ServingSpec(
        job_id=str(job.public_id),
        team_slug=job.team.slug,
        namespace=namespace,
        port=job.port,
        owner_uid=owner_uid or None,
        host=host,
        ingress_class_name=cluster.ingress_class_name or None,
        volcano_name=volcano_name or volcano.run_job_name(str(job.public_id), job.attempt_number),
    )


def _create(create: Any, namespace: str, manifest: dict[str, Any]) -> None:
    """Create, taking 409 AlreadyExists as done: the name is this job's own."""
    try:
        create(namespace, manifest)
    except KubeError as exc:
        if not exc.already_exists:
            raise


def serving_expose(
    *, job: Job, namespace: str, owner_uid: str | None, volcano_name: str | None = None
) -> str:
    """Create ``job``'s Service (and Ingress) and write its endpoint; returns the problem in
    words, or "" when the endpoint exists (or the job serves nothing). ``volcano_name``: the
    Volcano Job it serves, as created."""
    if not job.serves or job.cluster is None:
        return ""
    try:
        spec = serving_spec(job, namespace, owner_uid, volcano_name)
    except volcano.ManifestError as exc:
        problem = f"The job's endpoint cannot be made: {exc}"
        job_event_record(job, "EndpointFailed", problem)
        return problem
    try:
        client = cluster_client(job.cluster)
        _create(client.create_service, namespace, volcano.build_serving_service(spec))
        if spec.host is not None:
            _create(client.create_ingress, namespace, volcano.build_serving_ingress(spec))
    except (KubeError, ClusterUnavailable) as exc:
        problem = str(exc.message if isinstance(exc, KubeError) else exc)
        job_event_record(
            job,
            "EndpointFailed",
            f"Could not create the Service {namespace}/{spec.name}: {problem}; "
            "the cluster reconcile tries again.",
        )
        log.info("job %s: endpoint not made: %s", job.pk, problem)
        return problem
    url = volcano.serving_url(spec)
    kind = ServingExposure.INGRESS if spec.host is not None else ServingExposure.CLUSTERIP
    updated = Job.objects.filter(pk=job.pk, state__in=EXPOSED_STATES | {S.ADMITTED}).update(
        endpoint_url=url, endpoint_kind=kind
    )
    if updated:
        job.endpoint_url, job.endpoint_kind = url, kind
        what = f"Service {namespace}/{spec.name}" + (
            f" and Ingress for {spec.host}" if spec.host else ""
        )
        job_event_record(job, "Endpoint", f"{what} created; the job will answer at {url}.")
    return ""


def _delete(delete: Any, namespace: str, name: str) -> None:
    try:
        delete(namespace, name)
    except KubeError as exc:
        if not exc.not_found:
            raise


def serving_withdraw(*, job: Job, client: KubeClient | None = None) -> str:
    """Delete ``job``'s Service (and Ingress) and clear its endpoint; returns the problem in
    words, or "" when they are gone (or never were)."""
    if not job.serves or job.cluster is None:
        return ""
    record = VolcanoJobRecord.objects.filter(job_id=job.pk).only("namespace").first()
    namespace = record.namespace if record else cluster_job_namespace(job.cluster, job.team.slug)
    name = volcano.serving_service_name(str(job.public_id))
    ingress = (
        job.endpoint_kind == ServingExposure.INGRESS
        or job.cluster.serving_exposure == ServingExposure.INGRESS
    )
    try:
        client = client or cluster_client(job.cluster)
        _delete(client.delete_service, namespace, name)
        if ingress:
            _delete(client.delete_ingress, namespace, name)
    except (KubeError, ClusterUnavailable) as exc:
        problem = str(exc.message if isinstance(exc, KubeError) else exc)
        log.info("job %s: endpoint not removed: %s", job.pk, problem)
        return problem
    if (
        Job.objects.filter(pk=job.pk)
        .exclude(endpoint_url="", endpoint_ready=False)
        .update(endpoint_url="", endpoint_kind="", endpoint_ready=False)
    ):
        job_event_record(job, "EndpointRemoved", f"Service {namespace}/{name} deleted.")
    job.endpoint_url, job.endpoint_kind, job.endpoint_ready = "", "", False
    return ""


def endpoint_ready_apply(*, job: Job, pods: Mapping[str, Mapping[str, Any]]) -> bool:
    """Record whether every replica of ``job`` reports Ready (from the record's pod map:
    replica → ``{"ready", ...}``); returns the new value.

    Ready means what a Service means by it: the pod is an endpoint (a pod that stops running
    loses its Ready condition first). A job with a replica not yet seen is not ready; the first
    time it is, the timeline says so.
    """
    ready = len(pods) >= job.replicas and all(
        entry.get("ready") for replica, entry in pods.items() if int(replica) < job.replicas
    )
    changed = ready != job.endpoint_ready and bool(
        Job.objects.filter(pk=job.pk).exclude(endpoint_ready=ready).update(endpoint_ready=ready)
    )
    if changed:
        job.endpoint_ready = ready
        if ready and job.state == S.RUNNING and job.endpoint_url:
            job_event_record(
                job,
                "Serving",
                f"All {job.replicas} replica(s) pass their readiness probe; serving at "
                f"{job.endpoint_url}.",
            )
    return ready


def _jobs(cluster: Cluster) -> Any:
    return Job.objects.filter(
        cluster_id=cluster.pk, kind=JobKind.INFERENCE, port__isnull=False
    ).select_related("team", "cluster")


def serving_reconcile(*, cluster: Cluster) -> tuple[int, int]:
    """Bring the endpoints on ``cluster`` in line with its jobs: make the missing ones of jobs
    whose pods may run, delete those of jobs that ended or went back to the queue. Returns
    (made, removed). Two indexed queries when there is nothing to do."""
    made = removed = 0
    missing = list(_jobs(cluster).filter(state__in=EXPOSED_STATES, endpoint_url=""))
    records = {
        r.job_id: r
        for r in VolcanoJobRecord.objects.filter(job_id__in=[j.pk for j in missing]).only(
            "job_id", "namespace", "uid", "name"
        )
    }
    for job in missing:
        record = records.get(job.pk)
        if record is None:
            continue  # the dispatcher writes the record with SUBMITTED; next time
        if not serving_expose(
            job=job, namespace=record.namespace, owner_uid=record.uid, volcano_name=record.name
        ):
            made += 1
    stale: Iterable[Job] = (
        _jobs(cluster).filter(state__in=TERMINAL_STATES | {S.QUEUED}).exclude(endpoint_url="")
    )
    for job in stale:
        if not serving_withdraw(job=job):
            removed += 1
    return made, removed


# ---------------------------------------------------------------------------------------------
# Calling the server through the portal (``gpupool port-forward``)
# ---------------------------------------------------------------------------------------------
class ClusterRefused(ApplicationError):
    """The cluster could not be reached, or its API server refused the portal's request."""

    status = 502


class NotServing(ApplicationError):
    """The job's Service has no Ready endpoint yet (or no more)."""

    status = 503


PROXY_STATES = frozenset({S.RUNNING})


def job_proxy(
    *,
    job: Job,
    method: str,
    path: str,
    query: list[tuple[str, str]],
    body: bytes = b"",
    content_type: str = "",
    accept: str = "",
) -> ProxyAnswer:
    """Relay one HTTP request to ``job``'s server through its cluster's API server (the
    service proxy), so a user reaches it from anywhere the portal is reachable; the caller
    has checked that the user may. The server's answer is returned whatever its status; the
    portal's and the API server's refusals (no Ready endpoint: 503; the cluster unreachable or
    refusing the portal: 502) are ApplicationErrors that say what to do."""
    if not job.serves:
        raise Conflict(
            f"Job {job.name} serves nothing: only an inference job with a port has a server.",
            fields={"job": ["Not an inference job with a port."]},
        )
    if job.state not in PROXY_STATES or job.cluster is None or not job.endpoint_url:
        raise Conflict(f"Job {job.name} is {job.state}: its server can be called while it runs.")
    segments = path.split("/")
    if any(part in (".", "..") for part in segments):
        raise ApplicationError(
            "The path may not contain . or .. segments.", fields={"path": ["No . or .. segments."]}
        )
    record = VolcanoJobRecord.objects.filter(job_id=job.pk).only("namespace").first()
    namespace = record.namespace if record else cluster_job_namespace(job.cluster, job.team.slug)
    service = volcano.serving_service_name(str(job.public_id))
    try:
        answer = cluster_client(job.cluster).service_proxy(
            namespace,
            service,
            job.port or 0,
            method=method,
            path=path,
            query=query,
            body=body,
            content_type=content_type,
            accept=accept,
        )
    except ValueError as exc:
        raise ApplicationError(
            "The body is not valid JSON, as its Content-Type says it is.",
            fields={"body": [str(exc)]},
        ) from exc
    except ClusterUnavailable as exc:
        raise ClusterRefused(f"Cluster {job.cluster.name} cannot be reached: {exc}") from exc
    except KubeError as exc:
        if exc.status == 503:
            raise _not_serving(job, exc.message) from exc
        raise ClusterRefused(f"Cluster {job.cluster.name}: {exc.message}") from exc
    refusal = _refusal(job, answer)
    if refusal is not None:
        raise refusal
    return answer


def _not_serving(job: Job, why: str) -> NotServing:
    return NotServing(
        f"Job {job.name}'s server is not ready: no replica passes its readiness probe yet "
        f"({why}). Try again in a moment; `gpupool show` says when it serves."
    )


def _refusal(job: Job, answer: ProxyAnswer) -> ApplicationError | None:
    """The portal's error for an answer that came from the API server itself (no Ready
    endpoint: 503; anything else: the cluster refused the portal, 502), None for the
    server's own answer, which is relayed as it is."""
    if not answer.cluster_error:
        return None
    if answer.status == 503:
        return _not_serving(job, answer.cluster_error)
    cluster = job.cluster.name if job.cluster else "?"
    hint = (
        "; the portal's service account needs services/proxy in the job's namespace "
        "(docs/cli.md, port-forward)"
        if answer.status in (401, 403)
        else ""
    )
    return ClusterRefused(f"Cluster {cluster} refused the request: {answer.cluster_error}{hint}")
