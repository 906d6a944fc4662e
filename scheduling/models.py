"""The GPU model catalog (and, with the scheduling issue, quotas and the usage ledger)."""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models


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

    class Meta:
        ordering = ["cost_factor", "key"]

    def __str__(self) -> str:
        return self.key
