"""Platform admins edit the group rules; the identities and the audit trail are read-only."""

from __future__ import annotations

from django.contrib import admin

from identity.models import ExternalIdentity, GroupRule, MembershipAudit


@admin.register(GroupRule)
class GroupRuleAdmin(admin.ModelAdmin):
    list_display = ["pattern", "team", "role", "provider"]
    list_filter = ["role", "provider"]
    search_fields = ["pattern", "team__slug"]


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(admin.ModelAdmin):
    list_display = ["user", "provider", "subject", "last_sign_in_at", "last_sync_at"]
    list_filter = ["provider"]
    search_fields = ["user__username", "subject"]
    readonly_fields = [
        "user",
        "provider",
        "subject",
        "groups",
        "staff_from_groups",
        "last_sign_in_at",
        "last_sync_at",
    ]


@admin.register(MembershipAudit)
class MembershipAuditAdmin(admin.ModelAdmin):
    list_display = ["at", "actor", "source", "team", "user", "action", "detail"]
    list_filter = ["source", "action"]

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False
