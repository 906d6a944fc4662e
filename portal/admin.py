"""Django admin: teams and memberships editable, jobs read-mostly (state changes only through
the state machine, so the admin never edits ``state``)."""

from __future__ import annotations

from typing import Any

from axes.utils import reset as axes_reset
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from portal.models import ApiToken, Job, JobEvent, Membership, Team
from portal.web.lockout import login_name_key

User = get_user_model()


admin.site.unregister(User)


@admin.register(User)
class PortalUserAdmin(UserAdmin):
    """Django's user admin, plus unlocking a login that django-axes locked out."""

    actions = ["unlock_login"]

    @admin.action(description="Unlock login (forget failed login attempts)")
    def unlock_login(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        """Forget the selected users' failed logins, from every address. An address locked by
        failures under other names is unlocked under Axes → Access attempts."""
        names = [u.get_username() for u in queryset]
        forgotten = sum(axes_reset(username=login_name_key(name)) for name in names)
        self.message_user(
            request,
            f"Unlocked {', '.join(names)} ({forgotten} failed-attempt record(s) forgotten).",
            messages.SUCCESS,
        )


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role"]
    list_filter = ["role", "team"]
    search_fields = ["user__username", "team__slug"]
    autocomplete_fields = ["user", "team"]


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ["created_at", "from_state", "to_state", "reason", "message", "actor"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "team",
        "owner",
        "state",
        "replicas",
        "gpus_per_replica",
        "gpu_model",
        "cluster",
        "submitted_at",
    ]
    list_filter = ["state", "kind", "team"]
    search_fields = ["name", "public_id", "owner__username"]
    list_select_related = ["team", "owner", "gpu_model", "cluster"]
    show_full_result_count = False  # COUNT(*) over a million jobs is not worth a page load
    inlines = [JobEventInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Job._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # submit through the form or API so validation and events apply


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created_at", "expires_at", "revoked_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    exclude = ["digest"]
