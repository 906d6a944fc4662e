"""Registered Kubernetes clusters: how to reach them, what GPUs they have, what runs there.

Credentials are stored only as a MultiFernet token (``clusters.secrets``); the CA certificate
is public and kept in clear. Everything the portal learns from a cluster (nodes, Volcano Job
status, watch positions) is a cache of the cluster's truth that the next sync may overwrite.
"""

from __future__ import annotations

from django.db import models


class ClusterState(models.TextChoices):
    ENABLED = "enabled", "Enabled"
    DRAINING = "draining", "Draining (running jobs finish, nothing new)"
    DISABLED = "disabled", "Disabled"


class AuthMethod(models.TextChoices):
    TOKEN = "token", "Bearer token"
    CLIENT_CERTIFICATE = "client-certificate", "Client certificate"
    IN_CLUSTER = "in-cluster", "The portal's own service account (in-cluster)"


class SharingMode(models.TextChoices):
    """How a cluster splits GPUs between pods (``../shared/k8s-reference/README.md``).

    ``none``: whole GPUs (and MIG slices) only. ``volcano-vgpu``: Volcano's deviceshare plugin
    with the volcano-vgpu-device-plugin (``volcano.sh/vgpu-number`` / ``vgpu-memory`` /
    ``vgpu-cores``, scheduled by Volcano). ``hami``: HAMi's device plugin and scheduler extender
    (``nvidia.com/gpu`` + ``nvidia.com/gpumem`` / ``gpucores``, pods scheduled by
    ``hami-scheduler``).
    """

    NONE = "none", "No sharing"
    VOLCANO_VGPU = "volcano-vgpu", "Volcano vGPU"
    HAMI = "hami", "HAMi"


class ServingExposure(models.TextChoices):
    """How an inference job's Service is reached (``docs/serving.md``).

    ``clusterip``: from inside the cluster, at ``<job>-serve.<namespace>.svc.cluster.local``.
    ``ingress``: also through an Ingress on the host the cluster's ``ingress_host_pattern``
    gives the job (TLS terminated by the cluster's ingress controller).
    """

    CLUSTERIP = "clusterip", "ClusterIP Service (in-cluster)"
    INGRESS = "ingress", "Ingress per job"


class Cluster(models.Model):
    """A Kubernetes cluster with Volcano installed where the portal runs admitted jobs.

    ``credentials`` holds the encrypted bearer token or client certificate and key; only
    ``credential_hint`` (never enough to use) is ever shown. ``request_rate`` and
    ``creates_in_flight`` bound what the portal asks of the API server (null: the settings'
    defaults). The ``*_synced_at`` / ``*_error`` pairs say when each background job last
    succeeded and, if the last attempt failed, why (in words, never with a secret).
    """

    name = models.SlugField(max_length=63, unique=True)
    api_url = models.URLField(max_length=255)
    state = models.CharField(max_length=16, choices=ClusterState.choices, default="enabled")
    namespace = models.CharField(
        max_length=63, default="gpupool", help_text="Namespace for jobs (unless one per team)"
    )
    namespace_per_team = models.BooleanField(
        default=False, help_text="Run each team's jobs in its own namespace gp-<team>"
    )
    scheduler_name = models.CharField(max_length=63, default="volcano")
    gpu_label = models.CharField(max_length=253, default="gpu-type")
    created_at = models.DateTimeField(auto_now_add=True)

    # How to connect. The CA is public; the credentials are a Fernet token.
    ca_pem = models.TextField(blank=True, help_text="CA certificate(s) of the API server, PEM")
    tls_server_name = models.CharField(max_length=253, blank=True)
    auth_method = models.CharField(
        max_length=24, choices=AuthMethod.choices, default=AuthMethod.TOKEN
    )
    credentials = models.TextField(blank=True, editable=False, help_text="Encrypted; never shown")
    credential_hint = models.CharField(max_length=80, blank=True, editable=False)
    credentials_updated_at = models.DateTimeField(null=True, blank=True, editable=False)

    prometheus_url = models.URLField(max_length=255, blank=True, help_text="DCGM metrics")
    command_namespace = models.CharField(
        max_length=63,
        default="gpupool-system",
        help_text="Namespace where the portal may create Volcano Commands (queue open/close)",
    )
    tolerate_gpu_taint = models.BooleanField(
        default=True, help_text="Pods tolerate the nvidia.com/gpu taint, whatever its effect"
    )
    run_as_non_root = models.BooleanField(default=False)
    sharing_mode = models.CharField(
        max_length=16,
        choices=SharingMode.choices,
        default=SharingMode.NONE,
        help_text="How shared (fractional) GPU jobs ask for their share on this cluster",
    )
    mount_service_account_token = models.BooleanField(default=False)
    serving_exposure = models.CharField(
        max_length=16,
        choices=ServingExposure.choices,
        default=ServingExposure.CLUSTERIP,
        help_text="How inference jobs are reached: a ClusterIP Service, or also an Ingress",
    )
    ingress_host_pattern = models.CharField(
        max_length=253,
        blank=True,
        help_text="Host of each inference job's Ingress, e.g. {job}.serve.example.org "
        "({job}: the Volcano Job's name, required; {team}: the team)",
    )
    ingress_class_name = models.CharField(
        max_length=253, blank=True, help_text="IngressClass for the Ingresses (empty: default)"
    )
    request_rate = models.PositiveIntegerField(
        null=True, blank=True, help_text="API requests per second (empty: the portal default)"
    )
    creates_in_flight = models.PositiveIntegerField(
        null=True, blank=True, help_text="Concurrent Volcano Job creates (empty: the default)"
    )

    # What the portal last learned.
    kubernetes_version = models.CharField(max_length=64, blank=True)
    last_test_at = models.DateTimeField(null=True, blank=True)
    last_test_ok = models.BooleanField(null=True)
    last_test_message = models.TextField(blank=True)
    inventory_synced_at = models.DateTimeField(null=True, blank=True)
    inventory_error = models.TextField(blank=True)
    queues_synced_at = models.DateTimeField(null=True, blank=True)
    queues_error = models.TextField(blank=True)
    reconciled_at = models.DateTimeField(null=True, blank=True)
    reconcile_error = models.TextField(blank=True)
    # Set by the first call that could not reach the API server (refused, unresolvable, TLS
    # refused, no answer in time, credentials refused), cleared by the next one that did.
    unreachable_since = models.DateTimeField(null=True, blank=True)
    unreachable_error = models.TextField(blank=True)
    doctor_checked_at = models.DateTimeField(
        null=True, blank=True, help_text="When the cluster doctor last looked (clusters.doctor)"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def takes_new_work(self) -> bool:
        return self.state == ClusterState.ENABLED

    @property
    def reachable(self) -> bool:
        return self.unreachable_since is None


class Node(models.Model):
    """One GPU resource of one node of a cluster, as the last inventory sync saw it.

    A node with whole GPUs has one row (``nvidia.com/gpu``); a node whose GPUs are partly cut
    into MIG slices (mixed strategy) has one more row per MIG resource, each mapped to its own
    catalog model (``a100-80gb-mig-1g.10gb``), because the scheduler's unit of capacity is a
    (node, model) pair. ``gpu_model`` is null for a product the catalog does not know: kept
    and shown as such, never scheduled. What the scheduler may still place here is
    ``gpu_allocatable`` minus ``gpus_used_by_others`` (pods the portal did not create) minus the
    portal's own jobs whose ``node_plan`` names this node. ``mig_resources`` repeats the node's
    MIG layout on every row, for display.
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
    devices = models.JSONField(
        default=list,
        blank=True,
        help_text="A shared node's devices in order: [{id, gib, others}] (UUID, GiB of GPU "
        "memory, GiB that pods the portal did not create hold on it)",
    )
    cpu_free_millicores = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Milli-CPU allocatable minus what pods the portal did not create request; "
        "null: the node reports none (not checked)",
    )
    memory_free_mib = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="MiB of memory allocatable minus what foreign pods request; null: unknown",
    )
    ready = models.BooleanField(default=True)
    schedulable = models.BooleanField(default=True, help_text="False when cordoned or tainted")
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["cluster", "name", "gpu_resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name", "gpu_resource"], name="one_row_per_node_resource"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name} ({self.gpu_resource})"


class ClusterWatch(models.Model):
    """Where one watch of a cluster stands: the resourceVersion to resume from, and who holds it.

    A watcher process takes the lease (``holder`` until ``lease_expires_at``) with a
    compare-and-set, so two watcher processes never follow the same stream; a crashed one's
    lease simply runs out. ``resource_version`` is only ever a position in the stream: the
    periodic reconcile, not the watch, is the truth.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="watches")
    resource = models.CharField(max_length=32, help_text="jobs or pods")
    resource_version = models.CharField(max_length=64, blank=True)
    holder = models.CharField(max_length=128, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    relists = models.PositiveIntegerField(default=0, help_text="Times a 410 forced a relist")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "resource"], name="one_watch_per_resource")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.resource}@{self.resource_version or '-'}"


class VolcanoJobRecord(models.Model):
    """The Volcano Job that runs a portal job, as the portal last saw it.

    Written by the dispatcher when it creates (or adopts) the object, and by the status
    watcher and reconciler afterwards. ``reported`` lists the pod-level facts already turned
    into JobEvents, so a repeated watch event or a reconcile never writes the same event twice.
    """

    job = models.OneToOneField("portal.Job", on_delete=models.CASCADE, related_name="volcano")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=63)
    submission_uid = models.CharField(max_length=64)
    uid = models.CharField(max_length=64, blank=True, help_text="metadata.uid on the cluster")
    phase = models.CharField(max_length=32, blank=True)
    retry_count = models.PositiveIntegerField(default=0)
    pods = models.JSONField(default=dict, blank=True, help_text="{replica: {pod, node, phase}}")
    reported = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField()
    seen_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["cluster", "namespace", "name"], name="vcjob_by_name")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.phase or 'unknown'})"


class FindingSeverity(models.TextChoices):
    ERROR = "error", "Error"
    WARNING = "warning", "Warning"
    INFO = "info", "Info"


class ClusterFinding(models.Model):
    """Something the cluster doctor (``clusters.doctor``) found wrong with a cluster's setup,
    in plain words with the fix: GPUs not advertised, a model label the catalog does not know,
    MIG and whole cards mixed, Volcano missing or misconfigured, no DCGM data.

    The rows of a cluster are replaced by every check (on registration, every inventory sync,
    and "Check now" on the cluster page); ``key`` (rule code and subject) is a finding's
    identity from one check to the next, so ``first_seen_at`` survives the replacement and only
    a finding that was not there before is news to the platform admins. ``rank`` orders the
    list, most serious first.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="findings")
    key = models.CharField(max_length=255)
    code = models.CharField(max_length=64)
    severity = models.CharField(max_length=16, choices=FindingSeverity.choices)
    rank = models.PositiveSmallIntegerField(default=0)
    title = models.CharField(max_length=500)
    explanation = models.TextField()
    fix = models.TextField()
    detail = models.TextField(
        blank=True,
        default="",
        help_text="The raw error behind the finding, for platform admins only (it can name "
        "hosts and addresses)",
    )
    nodes = models.JSONField(default=list, blank=True)
    first_seen_at = models.DateTimeField()
    seen_at = models.DateTimeField()

    class Meta:
        ordering = ["cluster", "rank", "code", "key"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "key"], name="one_finding_per_key")
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.severity} {self.key}"
