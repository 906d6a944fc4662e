"""Teams, memberships, jobs, their event timeline and earlier attempts, job templates, the
in-portal notifications, and personal API tokens."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class Team(models.Model):
    """A Team is the unit of tenancy: jobs, quota and fair share belong to a team, not a user."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=40, unique=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer (read-only)"
    MEMBER = "member", "Member"
    ADMIN = "admin", "Team admin"


class Membership(models.Model):
    """A user's role in one team. Viewers read; members submit and cancel their own jobs; team
    admins cancel any of the team's jobs. Platform admins (``is_staff``) see every team."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="one_role_per_team")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class JobState(models.TextChoices):
    QUEUED = "QUEUED"
    ADMITTED = "ADMITTED"
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PREEMPTING = "PREEMPTING"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# Volcano phases of a job that ran and now waits for its pods again (``Job.status``).
RESTARTING_PHASES = frozenset({"Pending", "Restarting"})
ACTIVE_STATES = frozenset(set(JobState) - TERMINAL_STATES)
# Admitted onto a cluster and not yet given back: the job's node plan counts against its
# nodes, its quota is in use, and the clusters app follows its Volcano Job.
HOLDING_STATES = (
    JobState.ADMITTED,
    JobState.SUBMITTED,
    JobState.RUNNING,
    JobState.PREEMPTING,
    JobState.CANCELLING,
)
FOLLOWED_STATES = HOLDING_STATES
# What a reclaim may take: holding GPUs and not already on the way out.
PREEMPTIBLE_STATES = (JobState.ADMITTED, JobState.SUBMITTED, JobState.RUNNING)


class JobKind(models.TextChoices):
    TRAINING = "training", "Training"
    INFERENCE = "inference", "Inference"


class SelectionPolicy(models.TextChoices):
    CHEAPEST = "cheapest", "Cheapest adequate model"
    FASTEST = "fastest", "Fastest model"
    ORDERED = "ordered", "My order of models"


class Priority(models.IntegerChoices):
    LOW = 0, "low"
    NORMAL = 50, "normal"
    HIGH = 100, "high"


class Job(models.Model):
    """A request for ``replicas`` × ``gpus_per_replica`` GPUs of one model on one cluster.

    The row is the source of truth and the outbox: its ``state`` only changes through
    ``portal.jobs.state.job_transition`` (a compare-and-set), and periodic reconcilers find rows
    whose state has not moved for longer than a lease. ``id`` is internal (ordering, foreign
    keys); ``public_id`` is what users, URLs and cluster objects see.
    """

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # No index of their own: the newest-first indexes below lead with each (every insert and
    # every update that is not HOT writes each index of the table, the cycle's by the
    # thousand).
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs", db_index=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=JobKind.choices, default=JobKind.TRAINING)

    image = models.CharField(max_length=512)
    command = models.JSONField(default=list, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    env_from_secrets = models.JSONField(
        default=dict,
        blank=True,
        help_text='NAME → {"secret": …, "key": …}: read by the kubelet from a Secret in the '
        "job's namespace (valueFrom.secretKeyRef); the value never reaches the portal",
    )

    replicas = models.PositiveIntegerField(default=1)
    gpus_per_replica = models.PositiveIntegerField(
        default=1,
        help_text="Capacity units per replica on the job's model: GPUs, MIG slices, or for a "
        "shared GPU the GiB of GPU memory (equal to gpu_memory_gib)",
    )
    gpu_memory_gib = models.PositiveIntegerField(
        null=True, blank=True, help_text="A shared GPU: GPU memory per replica, GiB (else null)"
    )
    gpu_cores_percent = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="A shared GPU: compute per replica, % of a device"
    )
    cpu_millicores = models.PositiveIntegerField(help_text="CPU per replica, millicores")
    memory_mib = models.PositiveIntegerField(help_text="Memory per replica, MiB")

    # The GPU requirement: an ordered list of acceptable model keys, or constraints.
    gpu_models = models.JSONField(default=list, blank=True)
    min_gpu_memory_gib = models.PositiveIntegerField(null=True, blank=True)
    requires_bf16 = models.BooleanField(default=False)
    requires_fp8 = models.BooleanField(default=False)
    min_fp16_tflops = models.FloatField(null=True, blank=True)
    selection_policy = models.CharField(
        max_length=16, choices=SelectionPolicy.choices, default=SelectionPolicy.CHEAPEST
    )
    allow_fallback = models.BooleanField(default=True)

    priority = models.SmallIntegerField(choices=Priority.choices, default=Priority.NORMAL)
    max_runtime_seconds = models.PositiveIntegerField()
    max_retry = models.PositiveSmallIntegerField(
        default=3,
        help_text="Restarts of the whole gang after an eviction (Volcano maxRetry); bounded by "
        "GPUPOOL_MAX_RETRY",
    )
    port = models.PositiveIntegerField(null=True, blank=True, help_text="Inference only")
    readiness_path = models.CharField(
        max_length=1024,
        blank=True,
        default="",
        help_text="Inference only: HTTP path of the readiness probe on the port (empty: TCP)",
    )
    # An inference job's endpoint, written by the clusters room: the URL once its Service (and
    # Ingress) exist on the cluster, "" before and after; ready while every replica's pod
    # reports Ready. The portal shows "serving" only while the job is also RUNNING.
    endpoint_url = models.CharField(max_length=512, blank=True, default="")
    endpoint_kind = models.CharField(
        max_length=16, blank=True, default="", help_text="clusterip or ingress"
    )
    endpoint_ready = models.BooleanField(default=False)

    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)
    state_changed_at = models.DateTimeField()
    submitted_at = models.DateTimeField()
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    cluster = models.ForeignKey(
        "clusters.Cluster", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    gpu_model = models.ForeignKey(
        "scheduling.GpuModel", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    node_plan = models.JSONField(
        default=list, blank=True, help_text="Node name per replica (planned, then as bound)"
    )
    placement = models.JSONField(
        default=dict, blank=True, help_text="Why this model and cluster: the engine's explanation"
    )
    device_plan = models.JSONField(
        default=list,
        blank=True,
        help_text="A share's device per replica: its UUID (planned, then as the cluster's "
        "scheduler reports it), '' where unknown; empty for whole GPUs and slices",
    )
    volcano_job_name = models.CharField(max_length=63, blank=True)
    attempt_number = models.PositiveIntegerField(
        default=1,
        help_text="Which run of the job this is: 1, then one more per requeue (the JobAttempt "
        "rows are the runs before it). It names the run's Volcano Job",
    )
    dispatch_attempts = models.PositiveIntegerField(default=0)
    dispatch_next_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the dispatch was last attempted, or when its scheduled retry is due",
    )
    # A server's Retry-After is a promise to the server: no message, however it came (a wake
    # when the cluster answers again, a re-drive, a duplicate hand-off), sends before it.
    dispatch_not_before = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The cluster asked (Retry-After) for no create before this time",
    )
    dispatch_owner = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="The worker process (portal.workers) whose dispatch attempt is in progress",
    )
    # Counted up as an attempt starts, down when it ends in a way that proves its create never
    # reached the API server (connection refused, DNS, TLS certificate, 401, a 4xx answer): a
    # job may leave an unreachable cluster only at 0 (clusters.status.unreachable_requeue).
    creates_unsure = models.PositiveIntegerField(
        default=0,
        help_text="Create attempts of this admission that may have reached the cluster",
    )
    usage_accounted_until = models.DateTimeField(
        null=True, blank=True, help_text="GPU-hours up to here are in the usage ledger"
    )

    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True)

    cancel_reason = models.TextField(
        blank=True, help_text="Why it was cancelled, in the words of whoever cancelled it"
    )
    preemption_count = models.PositiveIntegerField(
        default=0, help_text="Times the scheduler preempted it to reclaim quota (and requeued it)"
    )
    # The start estimate of a queued job (scheduling.estimates, recomputed by every cycle's
    # forward simulation): written only when it changes, read by the job and queue pages.
    estimated_start_at = models.DateTimeField(
        null=True, blank=True, help_text="Estimated start (null: no estimate, the note says why)"
    )
    estimate_model = models.CharField(
        max_length=64, blank=True, help_text="GPU model key the job would get then"
    )
    estimate_cluster = models.CharField(
        max_length=100, blank=True, help_text="Cluster the job would get then"
    )
    estimate_note = models.TextField(
        blank=True, help_text="How the estimate was reached and why it may move, or why none"
    )
    estimate_updated_at = models.DateTimeField(
        null=True, blank=True, help_text="When the estimate last changed"
    )

    class Meta:
        ordering = ["-id"]
        indexes = [
            # Newest-first pages per team / per owner, filtered by state (cursor on -id).
            models.Index(fields=["team", "-id"], name="job_team_newest"),
            models.Index(fields=["owner", "-id"], name="job_owner_newest"),
            models.Index(fields=["team", "state", "-id"], name="job_team_state_newest"),
            # The scheduler's and reconcilers' scans: active jobs only.
            models.Index(
                fields=["state", "state_changed_at"],
                name="job_active_by_state",
                condition=~Q(state__in=["SUCCEEDED", "FAILED", "CANCELLED"]),
            ),
            # The submit's queue-limit counts (a team's, a member's there): every submit reads
            # at most a limit's worth of entries, never the member's history.
            models.Index(
                fields=["team", "owner"],
                name="job_queued_by_team_owner",
                condition=Q(state="QUEUED"),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="one_job_per_idempotency_key",
            ),
            models.CheckConstraint(condition=Q(replicas__gte=1), name="job_replicas_positive"),
            models.CheckConstraint(condition=Q(gpus_per_replica__gte=1), name="job_gpus_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.public_id})"

    # -- why a queued job waits, from its :class:`JobWait` (the last cycle's words) ----------
    def wait_known_absent(self) -> None:
        """Remember that the job has no wait yet (one just submitted: no cycle has seen it), so
        reading its reason or position answers at once instead of asking the database."""
        Job.wait.related.set_cached_value(self, None)

    def _wait(self) -> JobWait | None:
        """The last cycle's wait of a job still queued; None for one that left the queue (its
        row may outlive it until the next prune) or that no cycle has looked at yet."""
        if self.state != JobState.QUEUED:
            return None
        relation = Job.wait.related
        if relation.is_cached(self):  # loaded with the job (a list), or known absent
            return relation.get_cached_value(self)  # type: ignore[no-any-return]
        try:
            return self.wait
        except JobWait.DoesNotExist:
            return None

    @property
    def pending_reason_code(self) -> str:
        wait = self._wait()
        return wait.code if wait else ""

    @property
    def pending_reason(self) -> str:
        wait = self._wait()
        return wait.reason if wait else ""

    @property
    def queue_order_key(self) -> int | None:
        """Where the job stands in line as a sort key (``JobWait.order_key``), None unranked."""
        wait = self._wait()
        return wait.order_key if wait else None

    @property
    def queue_position(self) -> int | None:
        """The job's 1-based place among the jobs queued now, None while no cycle ranked it.

        Counted from the order keys when asked (one query), or set for a whole list at once by
        ``portal.jobs.waits.queue_positions_fill``; a job cancelled ahead drops out at once."""
        key = self.queue_order_key
        if key is None:
            return None
        known = self.__dict__.get("_queue_position")
        if known is None:
            known = self._queue_position = (
                JobWait.objects.filter(job__state=JobState.QUEUED, order_key__lt=key).count() + 1
            )
        return known

    @property
    def pending_notes_id(self) -> str | None:
        wait = self._wait()
        return wait.notes_id if wait else None

    @property
    def pending_notes(self) -> PendingNotes | None:
        wait = self._wait()
        if wait is None or wait.notes_id is None:
            return None
        try:
            return wait.notes
        except PendingNotes.DoesNotExist:  # pruned since: reads as no notes
            return None

    @property
    def pending_model(self) -> str:
        wait = self._wait()
        return wait.model if wait else ""

    @property
    def total_gpus(self) -> int:
        """Capacity units held in total (GiB of GPU memory for a shared GPU job)."""
        return self.replicas * self.gpus_per_replica

    @property
    def is_shared_gpu(self) -> bool:
        """Asks for a fraction of a GPU (Volcano vGPU / HAMi), not whole GPUs or MIG slices."""
        return self.gpu_memory_gib is not None

    @property
    def gpu_request_text(self) -> str:
        """What one replica asks for, in words: "2 GPU" or "20 GiB shared GPU, 50 % compute"."""
        if self.gpu_memory_gib is None:
            return f"{self.gpus_per_replica} GPU"
        text = f"{self.gpu_memory_gib} GiB shared GPU"
        if self.gpu_cores_percent is not None:
            text += f", {self.gpu_cores_percent} % compute"
        return text

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def serves(self) -> bool:
        """An inference job with a port: it gets a Service, a readiness probe, an endpoint."""
        return self.kind == JobKind.INFERENCE and self.port is not None

    @property
    def serving(self) -> bool:
        """Callable now: RUNNING, its Service made and every replica's pod Ready."""
        return (
            self.serves
            and self.state == JobState.RUNNING
            and bool(self.endpoint_url)
            and self.endpoint_ready
        )

    @property
    def curl_line(self) -> str:
        """A request a user can paste to try the endpoint (the readiness path, else ``/``)."""
        if not self.endpoint_url or self.is_terminal:
            return ""
        return f"curl -sS {self.endpoint_url}{self.readiness_path or '/'}"

    @property
    def status(self) -> str:
        """What the job is doing now, in one word: its state, or RESTARTING for a RUNNING job
        whose Volcano Job went back to Pending (its gang restarted after an eviction or a lost
        node and waits to be placed again). The job page, REST (``status``, next to
        ``state``), the CLI and the notifications all show this one value, with
        :attr:`status_reason` beside it.

        Why a status derived from the cluster's record and not a state of the machine: the
        job still holds its GPUs and its admission, so for the books (quota, the usage
        ledger, the capacity rule, the max runtime counted from ``started_at``, a reclaim's
        choice of victims) it is running; a RESTARTING state would have to be added to
        every one of those, and a RUNNING edge out of it would restart ``started_at``. A user
        filtering ``state=RUNNING`` gets every job that holds GPUs, restarting or not, and
        reads what each is doing in ``status``, the way ``kubectl get pods`` shows a pod of
        phase Running as ``CrashLoopBackOff``.
        """
        if self.state == JobState.RUNNING:
            record = getattr(self, "volcano", None)  # the cluster's record, when there is one
            if record is not None and record.phase in RESTARTING_PHASES:
                return "RESTARTING"
        return str(self.state)

    # The templates' older name for it.
    shown_state = status

    @property
    def status_reason(self) -> str:
        """Why the job is in its :attr:`status`, in words a user can act on: the cycle's
        reason for a queued job, what stopped its pods for a restarting one ("" otherwise)."""
        if self.state == JobState.QUEUED:
            return self.pending_reason
        if self.status != "RESTARTING":
            return ""
        record = self.volcano
        problems = [
            str(entry.get("problem"))
            for _, entry in sorted((record.pods or {}).items(), key=lambda kv: int(kv[0]))
            if isinstance(entry, dict) and entry.get("problem")
        ]
        reason = (
            "Its pods were stopped (evicted, or their node was lost) and wait to be placed "
            f"again; the job keeps its GPUs. Restarts allowed: {self.max_retry}."
        )
        if problems:
            reason += f" Last seen: {'; '.join(problems[:3])}."
        return reason


class JobWait(models.Model):
    """Why a queued job waits and where it stands in line, as the last scheduling cycle found.

    Beside the job, not on it: each cycle rewrites these for thousands of queued jobs (a
    reason's figures move with the freed quota), and rewriting this narrow row costs a third of
    rewriting the job's own 60-column one (docs/performance.md, docs/decisions.md). Written
    only by the cycle, under its lock; deleted as the job is admitted; a row whose job left the
    queue another way (cancelled) is ignored by readers (:meth:`Job._wait`) and pruned with
    the notes.

    The place in line is a sort key, not a rank: an admission ahead of a job, which moves
    everyone behind it up one place, changes no key, so the cycle rewrites only the jobs whose
    reason or relative order changed (``portal.jobs.waits.order_keys``). The rank users read
    is counted from the keys (:attr:`Job.queue_position`).
    """

    job = models.OneToOneField(Job, on_delete=models.CASCADE, primary_key=True, related_name="wait")
    code = models.CharField(max_length=40, blank=True)
    reason = models.TextField(blank=True)
    order_key = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Sorts the queue in the last cycle's order (smaller first); null: not ranked",
    )
    notes = models.ForeignKey(
        "PendingNotes",
        null=True,
        blank=True,
        # Notes are shared by every job that waits the same way and pruned by the cycle when
        # no queued job uses them; a missing row reads as "no notes", so no constraint ties
        # the two. Unindexed: the prune, every ten minutes, reads the table whole anyway, and
        # every index is one more write for each reason the cycle rewrites.
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
        help_text="The last cycle's note per candidate model (shared by equal waits)",
    )
    model = models.CharField(
        max_length=64,
        blank=True,
        help_text="Key of the closest candidate the job could get (the blocker that matters): "
        "wait statistics count the job under it",
    )

    def __str__(self) -> str:
        return f"{self.job_id}: {self.code}"


class PendingNotes(models.Model):
    """Why each candidate model of a queued job does not take it, as the scheduling cycle last
    found: ``[[model, code, message, kind], ...]`` in the engine's order, ``kind`` being
    ``lead`` (the closest candidate: the blocker that matters), ``other`` (another eligible
    one) or ``never`` (it can never take the job).

    Keyed by the MD5 of the notes' JSON and shared: the jobs of a deep queue wait in a handful
    of ways, so a cycle writes a 32-character key per job instead of a kilobyte of notes.
    """

    key = models.CharField(max_length=32, primary_key=True)
    notes = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.key


class JobEvent(models.Model):
    """One entry of a job's append-only timeline: a state change, or a notable fact about the
    job (a pod's OOMKill, a preemption notice) with ``from_state == to_state``."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField()
    from_state = models.CharField(max_length=16, choices=JobState.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=JobState.choices)
    reason = models.CharField(max_length=64)
    message = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["job", "created_at"], name="jobevent_timeline")]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_state or '∅'} → {self.to_state} ({self.reason})"


class ApiToken(models.Model):
    """A personal API token. Only a SHA-256 digest is stored; the token is shown once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, help_text="Public part used for lookup")
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class WorkerBeat(models.Model):
    """A Celery worker process that is alive: it writes ``seen_at`` every second.

    A dispatch in progress names its worker on the job (``Job.dispatch_owner``); a worker
    whose beat stopped (killed, crashed, its machine gone) no longer holds anything, and the
    re-drive (``clusters.redrive``) sends its jobs again within seconds instead of waiting for
    the broker's hour-long visibility timeout.
    """

    name = models.CharField(max_length=200, unique=True)
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.name


class JobAttempt(models.Model):
    """One earlier run of a job, from an admission to the requeue that ended it (a preemption,
    or pods the cluster could not place). The job row always describes its current or last
    run; when a run ends in a requeue, the row's placement is copied here before it is cleared,
    so every attempt keeps where it ran, why, and (``AttemptLog``) what its pods printed.

    Cluster and model are kept by name: the history outlives a deleted cluster or model.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField(help_text="1 for the first run")
    cluster_name = models.CharField(max_length=100, blank=True)
    gpu_model_key = models.CharField(max_length=64, blank=True)
    node_plan = models.JSONField(default=list, blank=True)
    placement = models.JSONField(default=dict, blank=True)
    volcano_job_name = models.CharField(max_length=63, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField()
    end_reason = models.CharField(max_length=64)
    end_message = models.TextField(blank=True)

    class Meta:
        ordering = ["job", "number"]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="one_attempt_per_number")
        ]

    def __str__(self) -> str:
        return f"{self.job_id} attempt {self.number} ({self.end_reason})"


class AttemptLog(models.Model):
    """The tail of one replica's log, kept when the portal deleted the attempt's pods (a
    preemption, a requeue, a cancel): the cluster forgets a deleted pod's log."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="kept_logs")
    attempt = models.PositiveIntegerField()
    replica = models.PositiveIntegerField()
    pod = models.CharField(max_length=253)
    text = models.TextField(blank=True)
    message = models.TextField(blank=True, help_text="Why there is no text, when there is none")
    captured_at = models.DateTimeField()

    class Meta:
        ordering = ["job", "attempt", "replica"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "attempt", "replica"], name="one_kept_log_per_replica"
            )
        ]

    def __str__(self) -> str:
        return f"{self.job_id} attempt {self.attempt} replica {self.replica}"


class TemplateScope(models.TextChoices):
    BUILTIN = "builtin", "Built-in"
    TEAM = "team", "Team"
    PERSONAL = "personal", "Mine"


class JobTemplate(models.Model):
    """A named job request to start a submission from: a personal one (its owner manages it),
    a team's (its team admins manage it, every member uses it), or a built-in one shipped as
    data (``portal/data/job-templates.json``, kept in sync on every ``migrate``).

    ``spec`` holds the request's fields as the REST API names them, without ``team``: the
    same dict a submission sends, so a template is validated like a job and never drifts
    from what the form and the API accept.
    """

    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    scope = models.CharField(max_length=16, choices=TemplateScope.choices)
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.CASCADE, related_name="job_templates"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="job_templates",
    )
    key = models.SlugField(
        max_length=64, null=True, blank=True, unique=True, help_text="Built-ins: id in the data"
    )
    spec = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(scope="builtin", team__isnull=True, owner__isnull=True, key__isnull=False)
                    | Q(scope="team", team__isnull=False, owner__isnull=True)
                    | Q(scope="personal", team__isnull=False, owner__isnull=False)
                ),
                name="jobtemplate_scope_fields",
            ),
            models.UniqueConstraint(
                fields=["team", "name"],
                condition=Q(scope="team"),
                name="one_team_template_per_name",
            ),
            models.UniqueConstraint(
                fields=["owner", "team", "name"],
                condition=Q(scope="personal"),
                name="one_personal_template_per_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.scope})"


ONCE_PER_JOB_KINDS = ("job.waiting", "job.near_max_runtime")


class Notification(models.Model):
    """A message to one user about one of their own jobs (it started, ended, was preempted,
    someone else cancelled it, it waits long, it nears its max runtime), their team's quota, or,
    for platform admins, a cluster. The bell and ``/notifications/`` list them; ``read_at`` is
    the in-portal delivery. Other channels (email, webhooks) hang off the same rows: they
    listen to ``portal.hooks.notifications_created`` and record their own
    delivery, so one state change is one notification whichever way it reaches its user.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    # Null for a notice about no one job: a team's quota changed, a cluster is unreachable.
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.CASCADE, related_name="notifications"
    )
    event = models.ForeignKey(
        JobEvent, null=True, blank=True, on_delete=models.CASCADE, related_name="notifications"
    )
    kind = models.CharField(max_length=32, help_text="job.running, job.succeeded, job.failed …")
    title = models.CharField(max_length=200)
    message = models.TextField(blank=True)
    created_at = models.DateTimeField()
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["user", "-created_at"], name="notification_newest"),
            models.Index(
                fields=["user"], name="notification_unread", condition=Q(read_at__isnull=True)
            ),
        ]
        constraints = [
            # The watch notices (waiting long, close to the max runtime) come once per job,
            # however many beat runs or workers look at it (the notifications app).
            models.UniqueConstraint(
                fields=["job", "kind"],
                name="notification_once_per_job",
                condition=Q(kind__in=ONCE_PER_JOB_KINDS),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.title}"


class TeamChange(models.Model):
    """One change a team admin (or platform admin) made to the team's own things: a team
    template or a team notification hook, created, edited or deleted. Who, when, what changed,
    in words; a webhook's signing secret never appears here.

    It lives in the portal core (the bottom layer) so that both the templates (portal.jobs)
    and the webhooks (the notifications wing above) can write it without an upward import;
    the team's members page (identity) reads it next to the membership audit."""

    at = models.DateTimeField(auto_now_add=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="changes")
    kind = models.CharField(max_length=16, help_text="template or webhook")
    action = models.CharField(max_length=16, help_text="created, edited or deleted")
    subject = models.CharField(max_length=100, help_text="The template's or webhook's name")
    detail = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["team", "-at"], name="teamchange_team_at")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.kind} {self.action} {self.subject} {self.detail}"
