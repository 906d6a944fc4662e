"""Teams, memberships, jobs, their event timeline, and personal API tokens."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


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
# Volcano phases of a job that ran and now waits for its pods again (``Job.shown_state``).
RESTARTING_PHASES = frozenset({"Pending", "Restarting"})
ACTIVE_STATES = frozenset(set(JobState) - TERMINAL_STATES)


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
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=JobKind.choices, default=JobKind.TRAINING)

    image = models.CharField(max_length=512)
    command = models.JSONField(default=list, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)

    replicas = models.PositiveIntegerField(default=1)
    gpus_per_replica = models.PositiveIntegerField(default=1)
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
    pending_reason_code = models.CharField(max_length=40, blank=True)
    pending_reason = models.TextField(blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    node_plan = models.JSONField(
        default=list, blank=True, help_text="Node name per replica (planned, then as bound)"
    )
    placement = models.JSONField(
        default=dict, blank=True, help_text="Why this model and cluster: the engine's explanation"
    )
    volcano_job_name = models.CharField(max_length=63, blank=True)
    dispatch_attempts = models.PositiveIntegerField(default=0)
    dispatch_next_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the dispatch was last attempted, or when its scheduled retry is due",
    )
    usage_accounted_until = models.DateTimeField(
        null=True, blank=True, help_text="GPU-hours up to here are in the usage ledger"
    )

    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True)

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

    @property
    def total_gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def shown_state(self) -> str:
        """The state as pages show it. A RUNNING job whose Volcano Job went back to Pending (its
        gang restarted after an eviction or a lost node) is RESTARTING: it keeps its GPUs and
        its state for the books, but its pods are not running."""
        if self.state == JobState.RUNNING:
            record = getattr(self, "volcano", None)  # the cluster's record, when there is one
            if record is not None and record.phase in RESTARTING_PHASES:
                return "RESTARTING"
        return str(self.state)


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
