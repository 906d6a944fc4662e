"""The GPU model catalog (and, with the scheduling issue, quotas and the usage ledger)."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from portal.models import Priority


class GpuModel(models.Model):
    """A GPU model is the unit of capacity the scheduler hands out, like a Kueue ResourceFlavor.

    A whole card (``a100-80gb``) or a MIG slice of one (``a100-80gb-mig-1g.10gb``). Nodes map to
    a model through their labels: the cluster's model label (``gpu-type=<key>``) or one of the
    ``product_labels`` that GPU Feature Discovery writes into ``nvidia.com/gpu.product``. The
    ``cost_factor`` weighs GPU-hours for fair share and drives the "cheapest adequate" choice.
    """

    key = models.SlugField(max_length=64, unique=True, help_text="Stable id, e.g. a100-80gb")
    vendor = models.CharField(max_length=32, default="NVIDIA")
    display_name = models.CharField(max_length=128)
    product_labels = models.JSONField(
        default=list,
        blank=True,
        help_text="Values of nvidia.com/gpu.product (GPU Feature Discovery) that mean this model",
    )
    architecture = models.CharField(max_length=32, blank=True)
    memory_gib = models.PositiveIntegerField(help_text="Memory per GPU (or per MIG slice), GiB")
    fp16_tflops = models.FloatField(
        validators=[MinValueValidator(0)], help_text="Dense FP16 tensor TFLOPS"
    )
    bf16 = models.BooleanField(default=False)
    fp8 = models.BooleanField(default=False)
    mig_capable = models.BooleanField(default=False)
    resource_name = models.CharField(
        max_length=128,
        default="nvidia.com/gpu",
        help_text="Extended resource a pod requests: nvidia.com/gpu, nvidia.com/mig-1g.10gb, …",
    )
    cost_factor = models.FloatField(
        validators=[MinValueValidator(0.001)],
        help_text="Relative cost of one GPU-hour (A100-80GB = 1.0)",
    )
    price_per_hour_usd = models.DecimalField(max_digits=8, decimal_places=2, null=True, blank=True)
    active = models.BooleanField(default=True, help_text="Inactive models take no new jobs")
    shares = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="shared_pools",
        help_text="A shared (fractional) pool of this card: capacity, quota and jobs count GiB "
        "of GPU memory, and cost_factor is per GiB-hour (the card's cost / its memory)",
    )

    class Meta:
        ordering = ["cost_factor", "key"]

    @property
    def is_shared(self) -> bool:
        """A shared pool: jobs ask for GiB of a device, never for devices."""
        return self.shares_id is not None

    def __str__(self) -> str:
        return self.key


class Cohort(models.Model):
    """A Cohort is a set of teams that lend each other idle nominal quota."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=40, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


DEFAULT_COHORT_SLUG = "default"


class TeamPolicy(models.Model):
    """A team's scheduling policy: fair-share weight, cohort, queue hold, queue limits (the
    team's and each member's), the highest priority its members may submit, and how its jobs
    are preempted (minimum runtime first, then a grace period between SIGTERM and SIGKILL).

    A team without a row gets the defaults (weight 1, the default cohort, not held, no queue
    limits, priorities up to normal). Platform admins set it.
    """

    team = models.OneToOneField("portal.Team", on_delete=models.CASCADE, related_name="policy")
    weight = models.FloatField(
        default=1.0, validators=[MinValueValidator(0.01)], help_text="Fair-share weight"
    )
    cohort = models.ForeignKey(
        Cohort, null=True, blank=True, on_delete=models.SET_NULL, related_name="policies"
    )
    held = models.BooleanField(default=False, help_text="Admit nothing new; running jobs go on")
    held_reason = models.CharField(max_length=200, blank=True)
    max_queued_jobs = models.PositiveIntegerField(
        null=True, blank=True, help_text="Submissions beyond this many queued jobs are refused"
    )
    max_queued_jobs_per_user = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="A member's submissions beyond this many of their own queued jobs in the team "
        "are refused",
    )
    max_priority = models.SmallIntegerField(
        choices=Priority.choices,
        default=Priority.NORMAL,
        help_text="Highest priority the team's members may submit; a job above it is refused, "
        "and one submitted before a lowering counts as this in every cycle",
    )

    min_runtime_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="A job of the team running on borrowed quota is not preempted before it has "
        "run this long (empty: the pool's default, GPUPOOL_PREEMPTION_MIN_RUNTIME_MINUTES)",
    )
    termination_grace_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Seconds the team's pods get between SIGTERM and SIGKILL when stopped "
        "(terminationGracePeriodSeconds; empty: the pool's default, "
        "GPUPOOL_TERMINATION_GRACE_SECONDS)",
    )

    class Meta:
        verbose_name_plural = "team policies"

    def __str__(self) -> str:
        return f"policy of {self.team}"


class Quota(models.Model):
    """A team's GPUs of one model, pool-wide (the scheduler picks the cluster).

    ``nominal`` is guaranteed: jobs within it are never preempted for another team.
    ``borrowing_limit`` caps what the team may take above nominal from idle cohort quota (null =
    no limit but the cohort's idle quota); ``lending_limit`` caps how much of its idle nominal
    quota the cohort may borrow (null = all of it).
    """

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="quotas")
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.CASCADE, related_name="quotas")
    nominal = models.PositiveIntegerField(default=0)
    borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    lending_limit = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team", "gpu_model"]
        constraints = [
            models.UniqueConstraint(fields=["team", "gpu_model"], name="one_quota_per_team_model")
        ]

    def __str__(self) -> str:
        unit = " GiB of " if self.gpu_model.is_shared else " × "
        return f"{self.team}: {self.nominal}{unit}{self.gpu_model}"


class CohortQuota(models.Model):
    """GPUs of one model owned by a cohort rather than by any team (Kueue's cohort quota,
    Run:ai's over-quota): every member may borrow them, nobody is guaranteed them, so a job
    running on them is always on borrowed quota and a team within its nominal may reclaim it.

    Capacity owned by the whole pool is a row on the ``default`` cohort, the cohort of every team
    that names none (``docs/decisions.md``).
    """

    cohort = models.ForeignKey(Cohort, on_delete=models.CASCADE, related_name="quotas")
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.CASCADE, related_name="cohort_quotas")
    nominal = models.PositiveIntegerField(default=0, help_text="GPUs every member may borrow")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cohort", "gpu_model"]
        constraints = [
            models.UniqueConstraint(
                fields=["cohort", "gpu_model"], name="one_quota_per_cohort_model"
            )
        ]

    def __str__(self) -> str:
        unit = " GiB of " if self.gpu_model.is_shared else " × "
        return f"cohort {self.cohort}: {self.nominal}{unit}{self.gpu_model}"


class QuotaChange(models.Model):
    """Audit trail of quota and policy edits: who changed what, when, old → new.

    A team's quota or policy names the team; a cohort's own quota names the cohort instead.
    """

    team = models.ForeignKey(
        "portal.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    cohort = models.ForeignKey(
        Cohort, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    gpu_model = models.ForeignKey(
        GpuModel, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    field = models.CharField(max_length=40)
    old_value = models.CharField(max_length=40, blank=True)
    new_value = models.CharField(max_length=40, blank=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    changed_at = models.DateTimeField()

    class Meta:
        ordering = ["-changed_at", "-id"]

    @property
    def owner(self) -> str:
        """Whose quota changed: the team's slug, or ``cohort <slug>``."""
        if self.team_id is not None:
            return str(self.team.slug)  # type: ignore[union-attr]
        if self.cohort_id is not None:
            return f"cohort {self.cohort.slug}"  # type: ignore[union-attr]
        return ""

    # How the audit list names each field, and what an empty value means for it.
    FIELD_WORDS: ClassVar[dict[str, tuple[str, str]]] = {
        "nominal": ("nominal quota", "0"),
        "borrowing_limit": ("borrowing limit", "none"),
        "lending_limit": ("lending limit", "none"),
        "cohort_nominal": ("cohort quota", "0"),
        "weight": ("fair-share weight", "1"),
        "cohort": ("cohort", "default"),
        "held": ("queue held", "no"),
        "held_reason": ("hold reason", "none"),
        "max_queued_jobs": ("queued jobs limit", "none"),
        "max_queued_jobs_per_user": ("queued jobs per member limit", "none"),
        "max_priority": ("highest priority", "none"),
        "min_runtime_minutes": ("minimum runtime before preemption (min)", "default"),
        "termination_grace_seconds": ("termination grace period (s)", "default"),
        # The catalog, edited on /catalog/ (scheduling.admin_edits): no team, no cohort.
        "active": ("takes new jobs", "no"),
        "cost_factor": ("cost factor", ""),
        "memory_gib": ("memory (GiB)", ""),
        "fp16_tflops": ("FP16 TFLOPS", ""),
        "display_name": ("display name", ""),
        "product_labels": ("product labels", "none"),
        "shared_pool": ("shared pool", "none"),
    }

    @property
    def field_label(self) -> str:
        return self.FIELD_WORDS.get(self.field, (self.field.replace("_", " "), ""))[0]

    def _shown(self, value: str) -> str:
        empty = self.FIELD_WORDS.get(self.field, ("", "none"))[1]
        if value in ("True", "False"):
            return "yes" if value == "True" else "no"
        return value if value != "" else empty

    @property
    def old_text(self) -> str:
        return self._shown(self.old_value)

    @property
    def new_text(self) -> str:
        return self._shown(self.new_value)

    @property
    def summary(self) -> str:
        """The change in words for people: ``borrowing limit: none → 8``."""
        return f"{self.field_label}: {self.old_text} → {self.new_text}"

    def __str__(self) -> str:
        model = self.gpu_model or ""
        return f"{self.owner} {model} {self.summary}"


class UsageRecord(models.Model):
    """GPU-hours one user of a team ran on one model in one UTC hour.

    Hourly buckets keep the ledger small and let fair share decay usage by bucket age
    (``weighted_gpu_hours`` × 0.5^(age / half-life)) in one grouped query.
    """

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+")
    hour = models.DateTimeField(help_text="Start of the UTC hour")
    gpu_hours = models.FloatField(default=0)
    weighted_gpu_hours = models.FloatField(default=0, help_text="gpu_hours × cost factor")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["team", "user", "gpu_model", "hour"], name="one_usage_bucket"
            )
        ]
        indexes = [models.Index(fields=["hour"], name="usage_by_hour")]

    def __str__(self) -> str:
        return f"{self.team} {self.gpu_model} {self.hour:%Y-%m-%d %H}h: {self.gpu_hours:.2f}"
