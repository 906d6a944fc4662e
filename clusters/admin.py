"""Cluster admin: registration through the same services as the CLI and the API.

The form takes a kubeconfig upload *or* an API URL, token and CA; either goes through
``cluster_credentials_from_input`` (the kubeconfig validator) and ``cluster_register`` (URL
check with DNS, encryption). The stored credentials are never rendered: the change page
shows their hint, and leaving the credential fields empty keeps them as they are.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.utils.html import format_html
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables

from clusters import tasks
from clusters.clients import cluster_url_check
from clusters.connection_test import cluster_test
from clusters.kubeconfig import MAX_KUBECONFIG_BYTES, ClusterCredentials
from clusters.models import Cluster, ClusterWatch, Node, ServingExposure, SharingMode
from clusters.registration import (
    cluster_credentials_from_input,
    cluster_register,
    cluster_settings_check,
)
from clusters.urlcheck import UnsafeUrlError
from portal.errors import ApplicationError

# What an error report (the 500 mail to ADMINS, any error tracker) must never show: the POSTed
# secrets, and every local variable below the add/change view (the kubeconfig and token pass
# through many frames, down to the YAML parser, under names no list could keep up with).
SECRET_POST_FIELDS = ("token", "kubeconfig")

OPTION_FIELDS = (
    "state",
    "namespace",
    "namespace_per_team",
    "scheduler_name",
    "gpu_label",
    "prometheus_url",
    "command_namespace",
    "tolerate_gpu_taint",
    "run_as_non_root",
    "mount_service_account_token",
    "sharing_mode",
    "serving_exposure",
    "ingress_host_pattern",
    "ingress_class_name",
    "request_rate",
    "creates_in_flight",
)


def _sync_soon(cluster_pk: int) -> None:
    """Read the inventory and sync the queues once the change is committed."""

    def enqueue() -> None:
        tasks.sync_inventory.delay(cluster_pk)
        tasks.sync_queues.delay(cluster_pk)

    transaction.on_commit(enqueue)


class ClusterForm(forms.ModelForm):
    prometheus_url = forms.URLField(
        required=False, assume_scheme="https", help_text="Prometheus with DCGM metrics (optional)"
    )
    kubeconfig = forms.FileField(
        required=False,
        help_text="A kubeconfig with exactly one cluster, user and context, the CA inline and a "
        "token or inline client certificate. Never stored as uploaded.",
    )
    new_api_url = forms.CharField(
        label="API URL", required=False, help_text="https://… (without a kubeconfig)"
    )
    token = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Service-account token (without a kubeconfig). Leave empty to keep the "
        "current credentials.",
    )
    new_ca_pem = forms.CharField(
        label="CA certificate (PEM)", required=False, widget=forms.Textarea(attrs={"rows": 4})
    )

    sharing_mode = forms.ChoiceField(
        label="GPU sharing mode",
        choices=SharingMode.choices,
        required=False,
        help_text="How shared (fractional) GPU jobs ask for their share on this cluster",
    )

    serving_exposure = forms.ChoiceField(
        label="Serving exposure",
        choices=ServingExposure.choices,
        required=False,
        help_text="How inference jobs are reached: a ClusterIP Service, or also an Ingress",
    )

    class Meta:
        model = Cluster
        fields = ["name", *OPTION_FIELDS]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not data.get("sharing_mode"):  # left out: keep what the cluster has (none if new)
            data["sharing_mode"] = self.instance.sharing_mode or SharingMode.NONE
        if not data.get("serving_exposure"):  # the same: keep it (ClusterIP if new)
            data["serving_exposure"] = self.instance.serving_exposure or ServingExposure.CLUSTERIP
        self.credentials: ClusterCredentials | None = None
        if data.get("serving_exposure") == "ingress" and not data.get("ingress_host_pattern"):
            self.add_error(
                "ingress_host_pattern",
                "An ingress cluster needs a host pattern, e.g. {job}.serve.example.org.",
            )
        if not self._settings_allowed(data):
            return data
        return self._clean_credentials(data)

    def _settings_allowed(self, data: dict[str, Any]) -> bool:
        """Name and options under ``cluster_register``'s rules, as field errors: whether or not
        credentials come with them, so nothing the CLI or REST refuses is stored from here.
        Each is checked on its own, so every wrong field is named at once."""
        pieces = [{"name": data.get("name")}] + [
            {f: data[f]} for f in OPTION_FIELDS if data.get(f) is not None
        ]
        allowed = True
        for piece in pieces:
            try:
                cluster_settings_check(**piece)
            except ApplicationError as exc:
                allowed = False
                for name, problems in (exc.fields or {"__all__": [exc.message]}).items():
                    self.add_error(name if name in self.fields else None, problems)
        return allowed

    def _clean_credentials(self, data: dict[str, Any]) -> dict[str, Any]:
        """Credentials from the upload or the URL + token + CA, through the one validator."""
        upload = data.get("kubeconfig")
        given = upload or data.get("token") or data.get("new_api_url") or data.get("new_ca_pem")
        if not given:
            if self.instance.pk is None:
                raise forms.ValidationError("Give a kubeconfig, or the API URL, token and CA.")
            return data
        text = None
        if upload:
            if upload.size > MAX_KUBECONFIG_BYTES:
                raise forms.ValidationError({"kubeconfig": "The file is too large."})
            text = upload.read()
        try:
            self.credentials = cluster_credentials_from_input(
                kubeconfig=text,
                api_url=data.get("new_api_url") or (self.instance.api_url or None),
                token=data.get("token"),
                ca_pem=data.get("new_ca_pem") or (self.instance.ca_pem or None),
            )
        except ApplicationError as exc:
            mapping = {"api_url": "new_api_url", "ca_pem": "new_ca_pem"}
            errors = {
                mapping.get(name, name): messages_
                for name, messages_ in exc.fields.items()
                if mapping.get(name, name) in self.fields
            }
            raise forms.ValidationError(errors or exc.message) from None
        try:
            cluster_url_check(self.credentials.server)
        except UnsafeUrlError as exc:
            field = "kubeconfig" if upload else "new_api_url"
            raise forms.ValidationError({field: f"The API URL is refused: {exc}"}) from None
        return data


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    form = ClusterForm
    list_display = ["name", "api_url", "state", "namespace", "credential_hint", "tested"]
    list_filter = ["state"]
    readonly_fields = [
        "api_url",
        "auth_method",
        "credential_hint",
        "credentials_updated_at",
        "kubernetes_version",
        "last_test_at",
        "last_test_ok",
        "last_test_message",
        "inventory_synced_at",
        "inventory_error",
        "queues_synced_at",
        "queues_error",
        "reconciled_at",
        "reconcile_error",
    ]
    actions = ["test_connection", "sync_now"]

    @method_decorator([sensitive_post_parameters(*SECRET_POST_FIELDS), sensitive_variables()])
    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The add and change pages, which receive a token or a kubeconfig."""
        return super().changeform_view(request, object_id, form_url, extra_context)

    def get_fieldsets(self, request: HttpRequest, obj: Cluster | None = None) -> Any:
        connection = ["kubeconfig", "new_api_url", "token", "new_ca_pem"]
        if obj is not None:
            connection = ["api_url", "auth_method", "credential_hint", *connection]
        return [
            (None, {"fields": ["name", "state"]}),
            ("Connection", {"fields": connection}),
            (
                "Jobs on this cluster",
                {"fields": [f for f in OPTION_FIELDS if f != "state"]},
            ),
            ("Status", {"fields": self.readonly_fields[3:]} if obj is not None else {"fields": []}),
        ]

    @admin.display(description="last test")
    def tested(self, obj: Cluster) -> str:
        if obj.last_test_at is None:
            return "never"
        return format_html(
            "{}: {}", "OK" if obj.last_test_ok else "FAILED", obj.last_test_message[:80]
        )

    def save_model(self, request: HttpRequest, obj: Cluster, form: Any, change: bool) -> None:
        """Store what the form validated; new credentials go through ``cluster_register``.

        On a change the row is saved first (name and options, checked by the form), so the
        re-key below updates this cluster under its new name instead of registering a second
        one. The admin's transaction covers both steps.
        """
        credentials = getattr(form, "credentials", None)
        if change:
            obj.save()
        if credentials is None:
            return  # only the name or options changed; the URL came with the credentials
        options = {f: form.cleaned_data[f] for f in OPTION_FIELDS if f in form.cleaned_data}
        # The form ran every check this can fail on; what is left (a name taken in between,
        # DNS changing since the form) is a 500 that rolls the admin's transaction back.
        cluster, _ = cluster_register(
            name=obj.name, credentials=credentials, update=change, **options
        )
        obj.pk = cluster.pk
        obj.refresh_from_db()
        _sync_soon(cluster.pk)

    @admin.action(description="Test connection")
    def test_connection(self, request: HttpRequest, queryset: QuerySet[Cluster]) -> None:
        for cluster in queryset:
            report = cluster_test(cluster=cluster)
            level = messages.SUCCESS if report.ok else messages.ERROR
            self.message_user(request, f"{cluster.name}: {report.summary}", level)

    @admin.action(description="Read inventory and sync queues now")
    def sync_now(self, request: HttpRequest, queryset: QuerySet[Cluster]) -> None:
        for cluster in queryset:
            _sync_soon(cluster.pk)
        self.message_user(request, f"Sync requested for {queryset.count()} cluster(s).")


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "cluster",
        "gpu_resource",
        "gpu_model",
        "gpu_product",
        "gpu_allocatable",
        "gpus_used_by_others",
        "ready",
        "schedulable",
        "last_seen_at",
    ]
    list_filter = ["cluster", "ready", "schedulable", "gpu_model"]
    search_fields = ["name", "gpu_product"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # the inventory sync owns these rows

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ClusterWatch)
class ClusterWatchAdmin(admin.ModelAdmin):
    list_display = ["cluster", "resource", "resource_version", "holder", "lease_expires_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
