"""Input serializers document the request bodies (validation is ``parse_job_spec``'s job, so
the form, single and batch submit share it); output serializers shape responses."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers

from portal.catalog import GpuModel
from portal.jobs import spec
from portal.jobs.blocker import blocker_of
from portal.jobs.spec import PRIORITY_BY_NAME
from portal.models import (
    Job,
    JobEvent,
    JobKind,
    JobState,
    JobTemplate,
    Notification,
    SelectionPolicy,
    Team,
    TemplateScope,
)
from rules.jobspec import REQUEST_FIELDS

PRIORITY_NAMES = {v: k for k, v in PRIORITY_BY_NAME.items()}
_AFTER_GPU_SIZES = REQUEST_FIELDS.index("cpu_per_replica")
_REQUEST_AS_SHOWN = (
    *REQUEST_FIELDS[:1],
    "owner",
    *REQUEST_FIELDS[1:_AFTER_GPU_SIZES],
    "total_gpus",
    *REQUEST_FIELDS[_AFTER_GPU_SIZES:],
)
"""A job's request as the API shows it (``rules.jobspec.REQUEST_FIELDS``, in its order), with
who submitted it after the team and the total GPUs after the GPU sizes."""
# Catalog keys are slugs, and MIG slices add dots (a100-80gb-mig-1g.10gb).
GPU_MODEL_KEY_PATTERN = r"^[-a-zA-Z0-9_.]+$"


def gpu_model_key_field(**kwargs: Any) -> serializers.RegexField:
    return serializers.RegexField(GPU_MODEL_KEY_PATTERN, max_length=64, **kwargs)


class JobInputSerializer(serializers.Serializer):
    """A job request. Give `gpu_models` (ordered) or constraints, not both; omit both for any.

    Documents the body only: ``portal.jobs.spec.parse_job_spec`` validates it, and these
    bounds are that function's (a null or omitted field takes its default).

    With `from_job`, the request starts as that job's own request (resubmit or clone) and the
    other fields given override it; `team`, `name` and `image` may then be left out."""

    from_job = serializers.UUIDField(
        required=False,
        help_text="Id of a job of your teams to resubmit: its request, with this body's fields "
        "on top (a model list replaces its constraints and the other way round)",
    )
    team = serializers.SlugField(help_text="Slug of one of your teams")
    name = serializers.CharField(max_length=spec.MAX_NAME_LENGTH)
    kind = serializers.ChoiceField(
        choices=JobKind.choices, default=JobKind.TRAINING, allow_null=True
    )
    image = serializers.CharField(max_length=512, help_text="e.g. nvcr.io/nvidia/pytorch:24.05-py3")
    command = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        allow_null=True,
        max_length=spec.MAX_COMMAND_ITEMS,
    )
    args = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        allow_null=True,
        max_length=spec.MAX_COMMAND_ITEMS,
    )
    env = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        allow_null=True,
        help_text="Plain-text variables, visible to your team; names that look like "
        "credentials are refused (use env_from_secrets)",
    )
    env_from_secrets = serializers.DictField(
        child=inline_serializer(
            "SecretKeyRef",
            {
                "secret": serializers.CharField(help_text="Secret in the job's namespace"),
                "key": serializers.CharField(help_text="One of its data keys"),
            },
        ),
        required=False,
        allow_null=True,
        help_text='Variables read from a Kubernetes Secret on the cluster: {"HF_TOKEN": '
        '{"secret": "hf-credentials", "key": "token"}}; a missing Secret fails the job with '
        "CreateContainerConfigError",
    )
    replicas = serializers.IntegerField(
        min_value=1,
        max_value=settings.GPUPOOL_MAX_REPLICAS,
        default=1,
        allow_null=True,
        help_text="Gang size",
    )
    gpus_per_replica = serializers.IntegerField(
        min_value=1,
        max_value=settings.GPUPOOL_MAX_GPUS_PER_REPLICA,
        default=1,
        allow_null=True,
        help_text="At most the most GPUs any one node has",
    )
    gpu_memory_gib = serializers.IntegerField(
        min_value=1,
        max_value=4096,
        required=False,
        allow_null=True,
        help_text="A shared (fractional) GPU: GiB of one device's memory per replica, on the "
        "models offered as shared pools; gpus_per_replica then stays 1",
    )
    gpu_cores_percent = serializers.IntegerField(
        min_value=1,
        max_value=100,
        required=False,
        allow_null=True,
        help_text="A shared GPU: percent of the device's compute per replica (needs "
        "gpu_memory_gib)",
    )
    cpu_per_replica = serializers.FloatField(
        min_value=0.1,
        max_value=512,
        required=False,
        allow_null=True,
        help_text="Cores; default 4 per GPU",
    )
    memory_gib_per_replica = serializers.FloatField(
        min_value=0.25,
        max_value=4096,
        required=False,
        allow_null=True,
        help_text="GiB; default 16 per GPU",
    )
    gpu_models = serializers.ListField(
        child=gpu_model_key_field(),
        required=False,
        allow_null=True,
        max_length=spec.MAX_COMMAND_ITEMS,
        help_text="Acceptable model keys, in order",
    )
    min_gpu_memory_gib = serializers.IntegerField(
        min_value=1, max_value=4096, required=False, allow_null=True
    )
    requires_bf16 = serializers.BooleanField(required=False, allow_null=True)
    requires_fp8 = serializers.BooleanField(required=False, allow_null=True)
    min_fp16_tflops = serializers.FloatField(
        min_value=0, max_value=100000, required=False, allow_null=True
    )
    selection_policy = serializers.ChoiceField(
        choices=SelectionPolicy.choices, default=SelectionPolicy.CHEAPEST, allow_null=True
    )
    allow_fallback = serializers.BooleanField(default=True, allow_null=True)
    priority = serializers.ChoiceField(
        choices=list(PRIORITY_BY_NAME), default="normal", allow_null=True
    )
    max_runtime_minutes = serializers.IntegerField(
        min_value=1, max_value=spec.SpecLimits.max_runtime_minutes, default=1440, allow_null=True
    )
    max_retry = serializers.IntegerField(
        min_value=0,
        max_value=settings.GPUPOOL_MAX_RETRY,
        default=3,
        allow_null=True,
        help_text="Restarts of the whole job after its pods were evicted (Volcano maxRetry); "
        "at most GPUPOOL_MAX_RETRY",
    )
    port = serializers.IntegerField(
        min_value=1024, max_value=65535, required=False, allow_null=True, help_text="Inference only"
    )
    readiness_path = serializers.CharField(
        required=False,
        allow_blank=True,
        allow_null=True,
        max_length=1024,
        help_text="Inference only, with a port: the HTTP path the readiness probe GETs, e.g. "
        "/health (empty: a TCP probe on the port)",
    )


class BatchInputSerializer(serializers.Serializer):
    jobs = JobInputSerializer(many=True, help_text="1 to GPUPOOL_BATCH_MAX jobs, all or nothing")


class BatchJobSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    state = serializers.ChoiceField(choices=JobState.choices)


class BatchResultSerializer(serializers.Serializer):
    jobs = BatchJobSerializer(many=True, help_text="In the order they were given")


class CandidateNoteSerializer(serializers.Serializer):
    model = serializers.CharField(help_text="GPU model key")
    code = serializers.CharField(
        help_text="Why it does not take the job: NO_NODE_FITS, QUOTA_FULL, COHORT_CANNOT_LEND, "
        "HELD_FOR_OTHER_JOB, NO_ENABLED_CLUSTER, FALLBACK_NOT_ALLOWED; for `never`: "
        "REQUIREMENT_NOT_MET, NOT_IN_CATALOG, SLICE_NOT_NAMED, TOO_LARGE, NO_ENABLED_CLUSTER"
    )
    message = serializers.CharField(help_text="The model and the reason, with its numbers")


class BlockerSerializer(serializers.Serializer):
    """Why a queued job waits, the blocker that matters first (null unless QUEUED)."""

    code = serializers.CharField(help_text="The last cycle's reason code ('' before one)")
    sentence = serializers.CharField(
        help_text="Why it waits in one plain sentence: the code's meaning, then the message's "
        "numbers (what pages and the CLI show; `code` is kept for scripts)"
    )
    message = serializers.CharField(help_text="The last cycle's whole message")
    model = serializers.CharField(
        allow_null=True,
        help_text="The closest candidate model the job could get; wait statistics count the "
        "job under it (null when no candidate could ever take it)",
    )
    lead = CandidateNoteSerializer(
        allow_null=True, help_text="That candidate and why it does not take the job now"
    )
    others = CandidateNoteSerializer(
        many=True, help_text="Each other eligible candidate with its own reason, in policy order"
    )
    never = CandidateNoteSerializer(
        many=True,
        help_text="Candidates that can never take the job: requirement not met, not in the "
        "catalog, a MIG slice not named, a gang too large, a model in no cluster",
    )
    never_summary = serializers.CharField(help_text="`never` in one line ('' when empty)")


class StartRangeSerializer(serializers.Serializer):
    """The likely range of a start, as every estimate the API gives carries it."""

    earliest = serializers.DateTimeField(
        allow_null=True,
        required=False,
        help_text="Likely range: the soonest it starts (never in the past; null: no range)",
    )
    latest = serializers.DateTimeField(
        allow_null=True, required=False, help_text="Likely range: the latest it starts"
    )
    confidence = serializers.FloatField(
        allow_null=True,
        required=False,
        help_text="Share of starts the range is meant to hold (0.9), measured on /pool/estimates/",
    )
    comparable_runs = serializers.IntegerField(
        allow_null=True,
        required=False,
        help_text="Finished runs the runtimes it waits on were learned from (0: none yet, a "
        "wide range)",
    )
    unknown = serializers.BooleanField(
        required=False,
        help_text="True when it waits on a running job that has run longer than what was "
        "learned (or it is past the latest): when it starts is not known",
    )
    summary = serializers.CharField(
        required=False,
        help_text='In words: "between 17:40 and 19:10 UTC, most likely 18:05 UTC (…); 12 '
        'comparable runs", or "unknown: …"',
    )


class StartEstimateSerializer(StartRangeSerializer):
    """An estimate, not a promise, of when a queued job may start, with its basis."""

    at = serializers.DateTimeField(
        allow_null=True, help_text="Estimated start (null: no estimate, `basis` says why)"
    )
    source = serializers.ChoiceField(
        choices=["simulation", "none"],
        help_text="simulation: the scheduler's simulation of the queue (recomputed after every "
        "cycle, or run for this job alone until then; GET /api/v1/jobs/{id}/estimate/ adds the "
        "alternatives); none: no estimate, `basis` says why",
    )
    basis = serializers.CharField(help_text="How the estimate was reached, in words")
    model = serializers.CharField(
        help_text="GPU model it would get then (simulation only; '' otherwise)"
    )
    cluster = serializers.CharField(
        help_text="Cluster it would get then (simulation only; '' otherwise)"
    )
    most_likely = serializers.DateTimeField(
        allow_null=True, required=False, help_text="The most likely start, never in the past"
    )


class EndpointSerializer(serializers.Serializer):
    """Where an inference job is called, and whether it answers yet."""

    url = serializers.CharField(
        allow_null=True,
        help_text="http://<service>.<namespace>.svc.cluster.local:<port> on a ClusterIP cluster, "
        "https://<host> on an ingress cluster; null until the job's Service exists on its "
        "cluster (and again once the job has ended)",
    )
    kind = serializers.ChoiceField(
        choices=["clusterip", "ingress"], allow_null=True, help_text="How the URL is reached"
    )
    port = serializers.IntegerField(help_text="The port the server listens on")
    ready = serializers.BooleanField(
        help_text="True while the job is RUNNING and every replica passes its readiness probe"
    )
    readiness_path = serializers.CharField(
        help_text="The readiness probe's HTTP path ('' for a TCP probe)"
    )
    curl = serializers.CharField(help_text="A request to try it with ('' without a URL)")


def endpoint_of(job: Job) -> dict[str, Any] | None:
    """The ``endpoint`` object of the REST job view; None for jobs that serve nothing."""
    if not job.serves:
        return None
    return {
        # Cleared by the clusters room once the Service is deleted; not shown after the end
        # meanwhile, since nothing answers there any more.
        "url": (job.endpoint_url or None) if not job.is_terminal else None,
        "kind": (job.endpoint_kind or None) if not job.is_terminal else None,
        "port": job.port,
        "ready": job.serving,
        "readiness_path": job.readiness_path,
        "curl": job.curl_line,
    }


class JobSerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="public_id", read_only=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    cluster = serializers.CharField(
        source="cluster.name", default=None, read_only=True, allow_null=True
    )
    gpu_model = serializers.CharField(
        source="gpu_model.key", default=None, read_only=True, allow_null=True
    )
    priority = serializers.SerializerMethodField()
    total_gpus = serializers.IntegerField(read_only=True)
    cpu_per_replica = serializers.SerializerMethodField()
    memory_gib_per_replica = serializers.SerializerMethodField()
    max_runtime_minutes = serializers.SerializerMethodField()
    position = serializers.IntegerField(source="queue_position", read_only=True, allow_null=True)
    blocker = serializers.SerializerMethodField()
    endpoint = serializers.SerializerMethodField()
    status = serializers.CharField(
        read_only=True,
        help_text="What the job is doing now, as the job page, the CLI and the notifications "
        "show it: the state, or RESTARTING for a RUNNING job whose pods were stopped "
        "(evicted, node lost) and wait to be placed again; it keeps its GPUs, so `state` "
        "stays RUNNING (see Job.status)",
    )
    status_reason = serializers.CharField(
        read_only=True,
        help_text="Why it is in that status: the pending reason of a QUEUED job, what "
        "stopped a RESTARTING one's pods; '' otherwise",
    )

    class Meta:
        model = Job
        fields = [
            "id",
            *_REQUEST_AS_SHOWN,
            "endpoint",
            "state",
            "status",
            "status_reason",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "cluster",
            "gpu_model",
            "pending_reason_code",
            "pending_reason",
            "position",
            "blocker",
            "placement",
            "volcano_job_name",
            "dispatch_attempts",
            "preemption_count",
            "cancel_reason",
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

    @extend_schema_field(BlockerSerializer(allow_null=True))
    def get_blocker(self, job: Job) -> dict[str, Any] | None:
        blocker = blocker_of(job)
        return blocker.as_dict() if blocker else None

    @extend_schema_field(EndpointSerializer(allow_null=True))
    def get_endpoint(self, job: Job) -> dict[str, Any] | None:
        return endpoint_of(job)


class JobDetailSerializer(JobSerializer):
    """One job: its fields, and for a queued job a start estimate."""

    start_estimate = StartEstimateSerializer(
        allow_null=True, read_only=True, help_text="Null unless the job is QUEUED"
    )
    others_ahead = serializers.IntegerField(
        allow_null=True,
        read_only=True,
        help_text="How many of the jobs ahead in line belong to teams you cannot see (null "
        "unless the job is QUEUED and ranked)",
    )

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "start_estimate", "others_ahead"]
        read_only_fields = fields


class JobEventSerializer(serializers.ModelSerializer):
    from_state = serializers.ChoiceField(
        choices=JobState.choices, allow_blank=True, read_only=True, help_text="Empty on the first"
    )
    actor = serializers.CharField(
        source="actor.username", default=None, read_only=True, allow_null=True
    )

    class Meta:
        model = JobEvent
        fields = ["created_at", "from_state", "to_state", "reason", "message", "actor"]
        read_only_fields = fields


class GpuModelSerializer(serializers.ModelSerializer):
    key = gpu_model_key_field(read_only=True, help_text="Stable id, e.g. a100-80gb")

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


class CancelInputSerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=500,
        help_text="Why (optional): kept on the job, shown to its owner and in its timeline",
    )


class KeptLogSerializer(serializers.Serializer):
    replica = serializers.IntegerField()
    pod = serializers.CharField()
    text = serializers.CharField()
    message = serializers.CharField(help_text="Why there is no text, when there is none")
    captured_at = serializers.DateTimeField()


class AttemptSerializer(serializers.Serializer):
    """One run of a job, from an admission to its end."""

    number = serializers.IntegerField(help_text="1 for the first admission")
    current = serializers.BooleanField(help_text="The job's current (or last) run")
    cluster = serializers.CharField(allow_blank=True)
    gpu_model = serializers.CharField(allow_blank=True)
    node_plan = serializers.ListField(child=serializers.CharField())
    placement = serializers.DictField(help_text="Why this model and cluster (the engine's words)")
    volcano_job_name = serializers.CharField(allow_blank=True)
    admitted_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    end_reason = serializers.CharField(
        allow_blank=True, help_text="Preempted, Requeued, or the terminal state"
    )
    end_message = serializers.CharField(allow_blank=True)


class AttemptDetailSerializer(AttemptSerializer):
    logs = KeptLogSerializer(
        many=True, help_text="Each replica's last lines, kept when the portal deleted its pods"
    )


class JobTemplateSerializer(serializers.ModelSerializer):
    """A named job request. `spec` uses the job request's field names, without `team`."""

    scope = serializers.ChoiceField(
        choices=TemplateScope.choices,
        help_text="team: the team's admins manage it; personal: yours; builtin: shipped with the "
        "portal (read-only, not for new templates)",
    )
    team = serializers.SlugField(
        allow_null=True, required=False, help_text="Slug of the team it belongs to (none: built-in)"
    )
    owner = serializers.CharField(allow_null=True, read_only=True)
    spec = serializers.DictField(required=False, help_text="Job request fields (not `team`)")
    from_job = serializers.UUIDField(
        required=False, write_only=True, help_text="Start the spec from this job's request"
    )
    can_edit = serializers.BooleanField(read_only=True)

    class Meta:
        model = JobTemplate
        fields = [
            "id",
            "name",
            "description",
            "scope",
            "team",
            "owner",
            "key",
            "spec",
            "from_job",
            "can_edit",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "key", "created_at", "updated_at"]

    def to_representation(self, template: JobTemplate) -> dict[str, Any]:
        manage = self.context.get("can_manage")
        return {
            "id": template.pk,
            "name": template.name,
            "description": template.description,
            "scope": template.scope,
            "team": template.team.slug if template.team else None,
            "owner": template.owner.get_username() if template.owner else None,
            "key": template.key,
            "spec": template.spec,
            "can_edit": bool(manage(template)) if manage else False,
            "created_at": serializers.DateTimeField().to_representation(template.created_at),
            "updated_at": serializers.DateTimeField().to_representation(template.updated_at),
        }


class NotificationSerializer(serializers.ModelSerializer):
    job = serializers.UUIDField(
        source="job.public_id", default=None, read_only=True, allow_null=True
    )
    job_name = serializers.CharField(
        source="job.name", default=None, read_only=True, allow_null=True
    )
    event_reason = serializers.CharField(
        source="event.reason", default=None, read_only=True, allow_null=True
    )

    class Meta:
        model = Notification
        fields = [
            "id",
            "kind",
            "title",
            "message",
            "job",
            "job_name",
            "event_reason",
            "created_at",
            "read_at",
        ]
        read_only_fields = fields


class NotificationReadSerializer(serializers.Serializer):
    ids = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        allow_null=True,
        max_length=500,
        help_text="Omit to mark all read",
    )
