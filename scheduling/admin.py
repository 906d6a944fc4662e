"""Admin for the catalog, quotas and team policies; quota and policy saves go through the
audited services so the admin leaves the same trail as the quota page and the API."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from scheduling.models import Cohort, CohortQuota, GpuModel, Quota, QuotaChange, TeamPolicy
from scheduling.services import (
    TEAM_POLICY_FIELDS,
    cohort_quota_set,
    quota_set,
    team_policy_set,
)


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    list_display = [
        "key",
        "display_name",
        "memory_gib",
        "fp16_tflops",
        "bf16",
        "fp8",
        "resource_name",
        "cost_factor",
        "active",
    ]
    list_filter = ["vendor", "architecture", "active"]
    search_fields = ["key", "display_name"]


@admin.register(Cohort)
class CohortAdmin(admin.ModelAdmin):
    list_display = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = [
        "team",
        "gpu_model",
        "nominal",
        "borrowing_limit",
        "lending_limit",
        "updated_at",
    ]
    list_filter = ["team", "gpu_model"]
    list_select_related = ["team", "gpu_model"]

    def save_model(self, request: HttpRequest, obj: Quota, form: Any, change: bool) -> None:
        quota = quota_set(
            team=obj.team,
            model=obj.gpu_model,
            nominal=obj.nominal,
            borrowing_limit=obj.borrowing_limit,
            lending_limit=obj.lending_limit,
            by=request.user,
        )
        obj.pk = quota.pk


@admin.register(CohortQuota)
class CohortQuotaAdmin(admin.ModelAdmin):
    """GPUs a cohort owns (the ``default`` cohort's are the pool's); saves are audited."""

    list_display = ["cohort", "gpu_model", "nominal", "updated_at"]
    list_filter = ["cohort", "gpu_model"]
    list_select_related = ["cohort", "gpu_model"]

    def save_model(self, request: HttpRequest, obj: CohortQuota, form: Any, change: bool) -> None:
        quota = cohort_quota_set(
            cohort=obj.cohort, model=obj.gpu_model, nominal=obj.nominal, by=request.user
        )
        obj.pk = quota.pk


@admin.register(TeamPolicy)
class TeamPolicyAdmin(admin.ModelAdmin):
    list_display = [
        "team",
        "weight",
        "cohort",
        "held",
        "max_queued_jobs",
        "max_queued_jobs_per_user",
        "max_priority",
        "min_runtime_minutes",
        "termination_grace_seconds",
    ]
    list_filter = ["held", "cohort", "max_priority"]

    def save_model(self, request: HttpRequest, obj: TeamPolicy, form: Any, change: bool) -> None:
        fields = {f: getattr(obj, f) for f in TEAM_POLICY_FIELDS}
        policy = team_policy_set(team=obj.team, by=request.user, **fields)
        obj.pk = policy.pk


@admin.register(QuotaChange)
class QuotaChangeAdmin(admin.ModelAdmin):
    list_display = [
        "changed_at",
        "changed_by",
        "team",
        "cohort",
        "gpu_model",
        "field",
        "old_value",
        "new_value",
    ]
    list_filter = ["team", "cohort", "field"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
