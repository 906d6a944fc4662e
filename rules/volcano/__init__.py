"""The Volcano manifest builder: portal jobs and team queues as plain Kubernetes objects.

This package is pure: it imports the standard library only (the ground floor's import-linter
contract keeps Django, Celery, ``kubernetes`` and the project's apps out) and never speaks
to a cluster. The kube adapter turns
its dictionaries into API calls; tests validate them against the Volcano CRD schemas in
``../shared/k8s-reference/crds/``.

The package is split along its jobs, and re-exports all of them here (``from rules import
volcano`` then ``volcano.build_volcano_job``): ``names`` (API identities, labels, the Job's and
pods' names, Kubernetes' name rules), ``spec`` (the builder's checked input), ``sharing``
(fractional GPUs), ``job`` (the Volcano Job), ``queue`` (a team's Queue and its Commands) and
``serving`` (the Service and Ingress of an inference job).

A portal job becomes one ``batch.volcano.sh/v1alpha1`` Job. The decisions below are where
the issue left room; each is a constant or a small helper so it can be changed in one place.

Naming
    The Volcano Job is named ``gp-`` + the 32 hex digits of the portal job's UUID
    (:func:`volcano_job_name`). The full UUID costs nothing (the longest pod name, at 4096
    replicas, is 47 characters, well inside Volcano's rule
    ``len(job) + len(task) + digits + 2 <= 63``) and makes a name collision impossible, so a
    ``409 AlreadyExists`` always means "this job, dispatched before". The ``gp-`` prefix makes
    the name start with a letter, which the ``svc`` plugin's Service (a DNS-1035 label) needs.

Tasks
    Training uses Volcano's ``pytorch`` plugin convention for every replica count: a task
    ``master`` with one replica, plus a task ``worker`` with ``replicas - 1`` when there is more
    than one. The plugin then gives every pod ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``
    and ``RANK`` (master 0, worker i is rank i + 1), so the same ``torchrun`` command works for
    one replica and for 64. Portal replica ``r`` is pod ``<job>-master-0`` for ``r == 0`` and
    ``<job>-worker-<r-1>`` otherwise (:func:`replica_pod_name`). Inference is one task
    ``server`` whose replicas are independent.

Restarts
    Training pods run with ``restartPolicy: Never``: a rank restarted in place by the kubelet
    cannot rejoin a collective, so restarts are Volcano's, for the whole gang. Policies:
    ``PodEvicted -> RestartJob`` (node drain, preemption by Volcano; bounded by ``maxRetry``)
    and ``PodFailed -> TerminateJob``. The issue asked for ``AbortJob`` on ``PodFailed``; we
    use ``TerminateJob`` instead because ``Aborted`` is a resumable, non-terminal phase that
    ``ttlSecondsAfterFinished`` never collects, while ``Terminated`` is terminal. Both keep
    the failed pods (Volcano's "soft" retain), so logs and exit codes stay readable.
    Inference pods run with ``restartPolicy: OnFailure``: a crashed server restarts in place
    and keeps its GPUs, a clean exit completes. ``PodEvicted -> RestartPod`` recreates only
    the evicted replica; ``PodFailed`` (which, under OnFailure, means the runtime limit or a
    node-level failure) terminates the job, so a deadline can never be escaped by a restart.
    No ``TaskCompleted -> CompleteJob`` on the master: it would kill workers still writing
    their last checkpoint; the job completes when every pod has succeeded.

Gang
    ``minAvailable`` is the replica count for both kinds, matching the portal's admission,
    which reserved capacity for all replicas at once. Each task's ``minAvailable`` is its
    replica count.

Resources
    cpu, memory and the GPU resource are set in both ``requests`` and ``limits`` with equal
    values (Guaranteed QoS: last to be evicted under memory pressure, exclusive cores under
    the static CPU manager). The GPU is set in ``requests`` too, not only in ``limits``,
    because Volcano computes the PodGroup's ``minResources`` from the template's requests
    before the API server's defaulting would copy limits into them.

Runtime limit
    ``max_runtime_seconds`` becomes each pod's ``activeDeadlineSeconds``. It counts from pod
    start, so a ``RestartJob`` gives the new pods a fresh deadline; the portal enforces the
    job's total wall-clock limit itself (``clusters.deadlines``). ``max_retry`` is the job's
    own retry budget.

Pod security
    Every pod meets the Pod Security Standard "restricted" profile except ``runAsNonRoot``:
    no privileged containers, ``allowPrivilegeEscalation: false``, every capability dropped,
    seccomp ``RuntimeDefault``, no host namespaces, no host paths (the only volume is an
    optional memory-backed ``/dev/shm``), no service account token unless the cluster is
    configured for it, and no service-link environment variables (with one headless Service
    per job, a busy namespace would otherwise inject thousands of variables). Most GPU images
    (PyTorch, NGC) run as root, and ``runAsNonRoot: true`` makes the kubelet refuse them, so
    it is opt-in per cluster (``run_as_non_root``). Root without capabilities and without
    privilege escalation is the compromise.

Networking
    The ``svc`` plugin gives the pods stable DNS names and a NetworkPolicy admitting ingress
    only from the job's own pods. Training keeps that policy. Inference passes
    ``--disable-network-policy``, since a server the policy isolates cannot serve anyone.

Serving
    An inference container with a port declares it (named ``http``) and gets a readiness probe
    on it: an HTTP GET of the job's readiness path, or a TCP connect without one. Its Service is
    ``<job>-serve`` (:func:`build_serving_service`; the ``svc`` plugin's headless Service owns
    the job's own name), selecting the job's pods by Volcano's ``volcano.sh/job-name`` and the
    portal's job label, and on an ingress cluster an Ingress on the host the admin's pattern
    gives (:func:`build_serving_ingress`). Both carry an owner reference to the Volcano Job.

Queues
    One cluster-scoped ``scheduling.volcano.sh/v1beta1`` Queue per team and cluster
    (:func:`build_volcano_queue`). A queue's state is not a spec field: it lives in
    ``status.state``, which the API server drops on create and on writes to the main
    resource. A new queue starts Open; it is closed and reopened by a ``bus.volcano.sh``
    Command (:func:`build_queue_command`), which is what ``vcctl queue operate`` does.
"""

from __future__ import annotations

from rules.jobspec import MAX_READINESS_PATH
from rules.volcano.job import (
    build_volcano_job,
)
from rules.volcano.names import (
    ANNOTATION_DISPLAY_NAME,
    ANNOTATION_PORTAL_URL,
    ANNOTATION_SUBMISSION_UID,
    COMMAND_API_VERSION,
    COMMAND_KIND,
    CONTAINER_NAME,
    HOSTNAME_LABEL,
    JOB_API_VERSION,
    JOB_KIND,
    LABEL_ATTEMPT,
    LABEL_GPU_MODEL,
    LABEL_JOB_ID,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_TEAM,
    MANAGED_BY,
    MAX_ATTEMPT,
    MAX_GPUS_PER_REPLICA,
    MAX_REPLICAS,
    PORTAL_ENV_ATTEMPT,
    PORTAL_ENV_JOB_ID,
    PYTORCH_PORT,
    QUEUE_API_VERSION,
    QUEUE_KIND,
    READINESS_PERIOD_SECONDS,
    TASK_MASTER,
    TASK_SERVER,
    TASK_WORKER,
    VOLCANO_LABEL_JOB_NAME,
    VOLCANO_LABEL_TASK_INDEX,
    VOLCANO_LABEL_TASK_SPEC,
    JobKind,
    ManifestError,
    attempt_of,
    cpu_quantity,
    job_run_name,
    job_selector,
    label_value,
    managed_selector,
    memory_quantity,
    pod_name,
    pod_of_replica,
    readiness_path_check,
    replica_of_pod,
    replica_pod_name,
    run_job_name,
    team_namespace_name,
    volcano_job_name,
    volcano_queue_name,
)
from rules.volcano.queue import (
    QueueAction,
    build_queue_command,
    build_volcano_queue,
)
from rules.volcano.serving import (
    EXPOSURE_CLUSTERIP,
    EXPOSURE_INGRESS,
    EXPOSURES,
    ServingSpec,
    build_serving_ingress,
    build_serving_service,
    ingress_host,
    ingress_host_pattern_check,
    serving_service_name,
    serving_url,
)
from rules.volcano.sharing import (
    HAMI_GPU,
    HAMI_MEMORY,
    HAMI_USE_UUID,
    SHARING_HAMI,
    SHARING_VOLCANO_VGPU,
    VGPU_MEMORY,
    VGPU_USE_UUID,
    GpuShare,
)
from rules.volcano.spec import (
    SecretKeyRef,
    Toleration,
    VolcanoJobSpec,
)

__all__ = [
    "ANNOTATION_DISPLAY_NAME",
    "ANNOTATION_PORTAL_URL",
    "ANNOTATION_SUBMISSION_UID",
    "COMMAND_API_VERSION",
    "COMMAND_KIND",
    "CONTAINER_NAME",
    "EXPOSURES",
    "EXPOSURE_CLUSTERIP",
    "EXPOSURE_INGRESS",
    "HAMI_GPU",
    "HAMI_MEMORY",
    "HAMI_USE_UUID",
    "HOSTNAME_LABEL",
    "JOB_API_VERSION",
    "JOB_KIND",
    "LABEL_ATTEMPT",
    "LABEL_GPU_MODEL",
    "LABEL_JOB_ID",
    "LABEL_KIND",
    "LABEL_MANAGED_BY",
    "LABEL_TEAM",
    "MANAGED_BY",
    "MAX_ATTEMPT",
    "MAX_GPUS_PER_REPLICA",
    "MAX_READINESS_PATH",
    "MAX_REPLICAS",
    "PORTAL_ENV_ATTEMPT",
    "PORTAL_ENV_JOB_ID",
    "PYTORCH_PORT",
    "QUEUE_API_VERSION",
    "QUEUE_KIND",
    "READINESS_PERIOD_SECONDS",
    "SHARING_HAMI",
    "SHARING_VOLCANO_VGPU",
    "TASK_MASTER",
    "TASK_SERVER",
    "TASK_WORKER",
    "VGPU_MEMORY",
    "VGPU_USE_UUID",
    "VOLCANO_LABEL_JOB_NAME",
    "VOLCANO_LABEL_TASK_INDEX",
    "VOLCANO_LABEL_TASK_SPEC",
    "GpuShare",
    "JobKind",
    "ManifestError",
    "QueueAction",
    "SecretKeyRef",
    "ServingSpec",
    "Toleration",
    "VolcanoJobSpec",
    "attempt_of",
    "build_queue_command",
    "build_serving_ingress",
    "build_serving_service",
    "build_volcano_job",
    "build_volcano_queue",
    "cpu_quantity",
    "ingress_host",
    "ingress_host_pattern_check",
    "job_run_name",
    "job_selector",
    "label_value",
    "managed_selector",
    "memory_quantity",
    "pod_name",
    "pod_of_replica",
    "readiness_path_check",
    "replica_of_pod",
    "replica_pod_name",
    "run_job_name",
    "serving_service_name",
    "serving_url",
    "team_namespace_name",
    "volcano_job_name",
    "volcano_queue_name",
]
