"""REST API of the clusters app: thin views over the services and selectors.

Everyone logged in may list clusters and see their GPUs per model (safe fields only); platform
admins (staff) also see how each is configured, register clusters and test connections. No
response ever carries a credential: at most its hint.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import permissions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters import selectors, services
from clusters.models import Cluster
from portal.access import job_get_for_user
from portal.errors import ApplicationError, NotFound

# ---------------------------------------------------------------------------------------------
# Serializers
# ---------------------------------------------------------------------------------------------


class ClusterSerializer(serializers.ModelSerializer):
    """What every user may know about a cluster."""

    gpus = serializers.SerializerMethodField(help_text="Allocatable GPUs per model")

    class Meta:
        model = Cluster
        fields = ["name", "state", "gpus", "inventory_synced_at"]

    def get_gpus(self, cluster: Cluster) -> dict[str, int]:
        return dict(self.context.get("gpus", {}).get(cluster.pk, {}))


class ClusterAdminSerializer(ClusterSerializer):
    """What platform admins see as well (never the credentials, only their hint)."""

    class Meta:
        model = Cluster
        fields = [
            *ClusterSerializer.Meta.fields,
            "api_url",
            "namespace",
            "namespace_per_team",
            "scheduler_name",
            "gpu_label",
            "auth_method",
            "credential_hint",
            "credentials_updated_at",
            "prometheus_url",
            "request_rate",
            "creates_in_flight",
            "kubernetes_version",
            "last_test_at",
            "last_test_ok",
            "last_test_message",
            "inventory_error",
            "queues_synced_at",
            "queues_error",
            "reconciled_at",
            "reconcile_error",
        ]


class ClusterInputSerializer(serializers.Serializer):
    """Register a cluster: a kubeconfig, or the API URL, a token and the CA (PEM)."""

    name = serializers.SlugField(max_length=63)
    kubeconfig = serializers.CharField(required=False, write_only=True, trim_whitespace=False)
    api_url = serializers.CharField(required=False)
    token = serializers.CharField(required=False, write_only=True)
    ca_pem = serializers.CharField(required=False, trim_whitespace=False)
    namespace = serializers.CharField(required=False, max_length=63)
    namespace_per_team = serializers.BooleanField(required=False)
    scheduler_name = serializers.CharField(required=False, max_length=63)
    gpu_label = serializers.CharField(required=False, max_length=253)
    prometheus_url = serializers.URLField(required=False, allow_blank=True)
    state = serializers.ChoiceField(choices=["enabled", "draining", "disabled"], required=False)
    request_rate = serializers.IntegerField(required=False, min_value=1, allow_null=True)
    creates_in_flight = serializers.IntegerField(required=False, min_value=1, allow_null=True)


REPORT = inline_serializer(
    "ConnectionReport",
    {
        "ok": serializers.BooleanField(),
        "summary": serializers.CharField(),
        "version": serializers.CharField(),
        "node_count": serializers.IntegerField(allow_null=True),
        "checks": serializers.ListField(child=serializers.DictField()),
    },
)
OPTION_FIELDS = (
    "namespace",
    "namespace_per_team",
    "scheduler_name",
    "gpu_label",
    "prometheus_url",
    "state",
    "request_rate",
    "creates_in_flight",
)


def _gpu_context(user: Any) -> dict[str, Any]:
    return {"gpus": {c.pk: gpus for c, gpus in selectors.clusters_with_gpu_summary(user)}}


def _serializer_for(user: Any) -> type[ClusterSerializer]:
    return ClusterAdminSerializer if user.is_staff else ClusterSerializer


def _get(name: str) -> Cluster:
    cluster = selectors.cluster_get(name=name)
    if cluster is None:
        raise NotFound("Cluster not found.")
    return cluster


def _sync_soon(cluster_pk: int) -> None:
    from clusters import tasks

    def enqueue() -> None:
        tasks.sync_inventory.delay(cluster_pk)
        tasks.sync_queues.delay(cluster_pk)

    transaction.on_commit(enqueue)


class IsStaff(permissions.BasePermission):
    message = "Only platform admins manage clusters."

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated and request.user.is_staff)


# ---------------------------------------------------------------------------------------------
# Views
# ---------------------------------------------------------------------------------------------


# A registration's token or kubeconfig never reaches an error report (the 500 mail to ADMINS,
# any error tracker): not from a form-encoded POST, and not from any local variable below the
# view (the validated data, the serializer, the parser's frames). ``dispatch`` is what receives
# Django's request.
@method_decorator(
    [sensitive_post_parameters("token", "kubeconfig"), sensitive_variables()], name="dispatch"
)
class ClusterListView(APIView):
    """Clusters and their GPUs per model; platform admins register new ones here."""

    def get_permissions(self) -> list[Any]:
        if self.request.method == "POST":
            return [permissions.IsAuthenticated(), IsStaff()]
        return [permissions.IsAuthenticated()]

    @extend_schema(responses={200: ClusterAdminSerializer(many=True)})
    def get(self, request: Request) -> Response:
        clusters = selectors.clusters_visible_to(request.user)
        serializer = _serializer_for(request.user)(
            clusters, many=True, context=_gpu_context(request.user)
        )
        return Response(serializer.data)

    @extend_schema(request=ClusterInputSerializer, responses={201: ClusterAdminSerializer})
    def post(self, request: Request) -> Response:
        data = ClusterInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        credentials = services.cluster_credentials_from_input(
            kubeconfig=values.get("kubeconfig"),
            api_url=values.get("api_url"),
            token=values.get("token"),
            ca_pem=values.get("ca_pem"),
        )
        options = {k: values[k] for k in OPTION_FIELDS if k in values}
        cluster, _ = services.cluster_register(
            name=values["name"], credentials=credentials, **options
        )
        _sync_soon(cluster.pk)
        return Response(
            ClusterAdminSerializer(cluster, context=_gpu_context(request.user)).data,
            status=status.HTTP_201_CREATED,
        )


class ClusterDetailView(APIView):
    @extend_schema(responses={200: ClusterAdminSerializer})
    def get(self, request: Request, name: str) -> Response:
        cluster = _get(name)
        return Response(
            _serializer_for(request.user)(cluster, context=_gpu_context(request.user)).data
        )


class ClusterTestView(APIView):
    """Connect to the cluster and check everything the portal needs, in words."""

    permission_classes = [permissions.IsAuthenticated, IsStaff]

    @extend_schema(request=None, responses={200: REPORT})
    def post(self, request: Request, name: str) -> Response:
        report = services.cluster_test(cluster=_get(name))
        return Response(report.as_dict())


class ClusterSyncView(APIView):
    """Read the inventory and sync the queues now (in the background)."""

    permission_classes = [permissions.IsAuthenticated, IsStaff]

    @extend_schema(request=None, responses={202: None})
    def post(self, request: Request, name: str) -> Response:
        cluster = _get(name)
        _sync_soon(cluster.pk)
        return Response({"message": "Sync requested."}, status=status.HTTP_202_ACCEPTED)


class JobLogsView(APIView):
    """One replica's log (team members only; another team's job is a 404)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("replica", int, description="0-based replica (default 0)"),
            OpenApiParameter("tail", int, description="Last lines (default 500, at most 10,000)"),
        ],
        responses={
            200: inline_serializer(
                "JobLogs",
                {
                    "replica": serializers.IntegerField(),
                    "pod": serializers.CharField(),
                    "available": serializers.BooleanField(),
                    "message": serializers.CharField(),
                    "text": serializers.CharField(),
                },
            )
        },
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = job_get_for_user(request.user, job_id)
        replica = _int_param(request, "replica", 0)
        tail = _int_param(request, "tail", services.LOG_TAIL_DEFAULT)
        logs = services.job_logs(job=job, replica=replica, tail=tail)
        return Response(
            {
                "replica": logs.replica,
                "pod": logs.pod,
                "available": logs.available,
                "message": logs.message,
                "text": logs.text,
            }
        )


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApplicationError(
            f"{name} must be a whole number.", fields={name: ["A whole number."]}
        ) from None
