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
