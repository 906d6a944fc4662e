"""Input serializers document the request bodies (validation is ``parse_job_spec``'s job, so
the form, single and batch submit share it); output serializers shape responses."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from portal.jobs.spec import PRIORITY_BY_NAME
from portal.models import Job, JobEvent, JobKind, SelectionPolicy, Team
from scheduling.models import GpuModel

PRIORITY_NAMES = {v: k for k, v in PRIORITY_BY_NAME.items()}


class JobInputSerializer(serializers.Serializer):
    """A job request. Give `gpu_models` (ordered) or constraints, not both; omit both for any."""

    team = serializers.SlugField(help_text="Slug of one of your teams")
    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(choices=JobKind.choices, default=JobKind.TRAINING)
    image = serializers.CharField(max_length=512, help_text="e.g. nvcr.io/nvidia/pytorch:24.05-py3")
    command = serializers.ListField(child=serializers.CharField(), required=False)
    args = serializers.ListField(child=serializers.CharField(), required=False)
    env = serializers.DictField(child=serializers.CharField(), required=False)
    replicas = serializers.IntegerField(min_value=1, default=1, help_text="Gang size")
    gpus_per_replica = serializers.IntegerField(min_value=1, default=1)
    cpu_per_replica = serializers.FloatField(
        min_value=0.1, required=False, help_text="Cores; default 4 per GPU"
    )
    memory_gib_per_replica = serializers.FloatField(
        min_value=0.25, required=False, help_text="GiB; default 16 per GPU"
    )
    gpu_models = serializers.ListField(
        child=serializers.SlugField(), required=False, help_text="Acceptable model keys, in order"
    )
    min_gpu_memory_gib = serializers.IntegerField(min_value=1, required=False, allow_null=True)
    requires_bf16 = serializers.BooleanField(required=False)
    requires_fp8 = serializers.BooleanField(required=False)
    min_fp16_tflops = serializers.FloatField(min_value=0, required=False, allow_null=True)
    selection_policy = serializers.ChoiceField(
        choices=SelectionPolicy.choices, default=SelectionPolicy.CHEAPEST
    )
    allow_fallback = serializers.BooleanField(default=True)
    priority = serializers.ChoiceField(choices=list(PRIORITY_BY_NAME), default="normal")
    max_runtime_minutes = serializers.IntegerField(min_value=1, default=1440)
    max_retry = serializers.IntegerField(
        min_value=0,
        default=3,
        help_text="Restarts of the whole job after its pods were evicted (Volcano maxRetry); "
        "at most GPUPOOL_MAX_RETRY",
    )
    port = serializers.IntegerField(
        min_value=1024, max_value=65535, required=False, allow_null=True, help_text="Inference only"
    )


class BatchInputSerializer(serializers.Serializer):
    jobs = JobInputSerializer(many=True, help_text="1 to GPUPOOL_BATCH_MAX jobs, all or nothing")


class JobSerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="public_id", read_only=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    cluster = serializers.CharField(source="cluster.name", default=None, read_only=True)
    gpu_model = serializers.CharField(source="gpu_model.key", default=None, read_only=True)
    priority = serializers.SerializerMethodField()
    total_gpus = serializers.IntegerField(read_only=True)
    cpu_per_replica = serializers.SerializerMethodField()
    memory_gib_per_replica = serializers.SerializerMethodField()
    max_runtime_minutes = serializers.SerializerMethodField()
    position = serializers.IntegerField(source="queue_position", read_only=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "team",
            "owner",
            "name",
            "kind",
            "image",
            "command",
            "args",
            "env",
            "replicas",
            "gpus_per_replica",
            "total_gpus",
            "cpu_per_replica",
            "memory_gib_per_replica",
            "gpu_models",
            "min_gpu_memory_gib",
            "requires_bf16",
            "requires_fp8",
            "min_fp16_tflops",
            "selection_policy",
            "allow_fallback",
            "priority",
            "max_runtime_minutes",
            "max_retry",
            "port",
            "state",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "cluster",
            "gpu_model",
            "pending_reason_code",
            "pending_reason",
            "position",
            "placement",
            "volcano_job_name",
            "dispatch_attempts",
        ]
        read_only_fields = fields

    def get_priority(self, job: Job) -> str:
        return PRIORITY_NAMES.get(job.priority, str(job.priority))

    def get_cpu_per_replica(self, job: Job) -> float:
        return job.cpu_millicores / 1000

    def get_memory_gib_per_replica(self, job: Job) -> float:
        return round(job.memory_mib / 1024, 3)

    def get_max_runtime_minutes(self, job: Job) -> int:
        return job.max_runtime_seconds // 60


class JobEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", default=None, read_only=True)

    class Meta:
        model = JobEvent
        fields = ["created_at", "from_state", "to_state", "reason", "message", "actor"]
        read_only_fields = fields


class GpuModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuModel
        fields = [
            "key",
            "vendor",
            "display_name",
            "product_labels",
            "architecture",
            "memory_gib",
            "fp16_tflops",
            "bf16",
            "fp8",
            "mig_capable",
            "resource_name",
            "cost_factor",
            "active",
        ]
        read_only_fields = fields


class TeamSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["slug", "name", "description", "role"]
        read_only_fields = fields

    def get_role(self, team: Team) -> str | None:
        roles: dict[int, Any] = self.context.get("roles", {})
        return roles.get(team.pk)
