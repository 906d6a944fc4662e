"""Registered Kubernetes clusters (credentials and inventory arrive with the clusters issue)."""

from __future__ import annotations

from django.db import models


class ClusterState(models.TextChoices):
    ENABLED = "enabled", "Enabled"
    DRAINING = "draining", "Draining (running jobs finish, nothing new)"
    DISABLED = "disabled", "Disabled"


class Cluster(models.Model):
    """A Kubernetes cluster with Volcano installed where the portal runs admitted jobs."""

    name = models.SlugField(max_length=63, unique=True)
    api_url = models.URLField(max_length=255)
    state = models.CharField(max_length=16, choices=ClusterState.choices, default="enabled")
    namespace = models.CharField(
        max_length=63, default="gpupool", help_text="Namespace for jobs ('' = gp-<team>)"
    )
    scheduler_name = models.CharField(max_length=63, default="volcano")
    gpu_label = models.CharField(max_length=253, default="gpu-type")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    """One GPU node of a cluster as the last inventory sync saw it.

    ``gpu_model`` is the catalog model its labels map to (null: an unknown product, kept and
    shown as such). What the scheduler may still place here is ``gpu_allocatable`` minus
    ``gpus_used_by_others`` (pods the portal did not create) minus the portal's own jobs whose
    ``node_plan`` names this node.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    gpu_model = models.ForeignKey(
        "scheduling.GpuModel", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    gpu_product = models.CharField(max_length=253, blank=True, help_text="Raw label value")
    gpu_resource = models.CharField(max_length=128, default="nvidia.com/gpu")
    gpu_capacity = models.PositiveIntegerField(default=0)
    gpu_allocatable = models.PositiveIntegerField(default=0)
    gpus_used_by_others = models.PositiveIntegerField(default=0)
    mig_resources = models.JSONField(default=dict, blank=True, help_text="{resource: count}")
    ready = models.BooleanField(default=True)
    schedulable = models.BooleanField(default=True, help_text="False when cordoned or tainted")
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="one_node_name_per_cluster")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"
