"""Who a user is at a provider, which memberships a provider made, the admins' group rules,
and the audit trail of every membership change (by a rule or by a team admin)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from portal.models import Membership, Team


class MappedRole(models.TextChoices):
    VIEWER = "viewer", "Viewer (read-only)"
    MEMBER = "member", "Member"
    ADMIN = "admin", "Team admin"
    PLATFORM_ADMIN = "platform_admin", "Platform admin"


class GroupRule(models.Model):
    """Members of a provider group matching ``pattern`` (a shell glob such as ``gpu-vision-*``)
    get ``role`` in ``team`` (no team for a platform admin). Where several rules give the same
    team, the highest role wins. Applied at every sign-in and by the LDAP sync."""

    pattern = models.CharField(max_length=200, help_text="Group name or glob, e.g. gpu-vision-*")
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.CASCADE, related_name="group_rules"
    )
    role = models.CharField(max_length=16, choices=MappedRole.choices, default=MappedRole.MEMBER)
    provider = models.CharField(
        max_length=40,
        blank=True,
        help_text="Only for this provider (oidc:NAME or ldap); empty: all",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pattern", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(role="platform_admin", team__isnull=True))
                | (~models.Q(role="platform_admin") & models.Q(team__isnull=False)),
                name="group_rule_team_unless_platform_admin",
            )
        ]

    def __str__(self) -> str:
        target = self.team.slug if self.team_id else "platform"
        return f"{self.pattern} → {target} {self.role}"


class ExternalIdentity(models.Model):
    """The link from a provider's stable id for a person to a portal account (``oidc:NAME`` +
    ``sub``, or ``ldap`` + ``entryuuid:<uuid>`` / ``dn:<DN>``): the only way a sign-in reaches
    an account (identity/accounts.py); the groups last seen, and whether platform admin came
    from a group."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities"
    )
    provider = models.CharField(max_length=40)
    subject = models.CharField(max_length=512)
    groups = models.JSONField(default=list, blank=True)
    staff_from_groups = models.BooleanField(default=False)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)
    last_sync_at = models.DateTimeField(null=True, blank=True)
    # OpenID Connect only: the refresh token from the last sign-in with offline_access, sealed
    # with clusters.secrets.text_seal (GPUPOOL_SECRET_KEYS); the sync uses it, nothing shows it.
    refresh_token_sealed = models.TextField(blank=True, default="", editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "subject"], name="one_user_per_subject")
        ]

    def __str__(self) -> str:
        return f"{self.provider}:{self.subject} → {self.user}"


class ProviderMembership(models.Model):
    """Marks a membership as made by a provider's groups: a rule may change or remove it; a
    membership without this mark was made by hand and no rule touches it."""

    membership = models.OneToOneField(
        Membership, on_delete=models.CASCADE, related_name="provider_mark"
    )
    provider = models.CharField(max_length=40)
    groups = models.JSONField(default=list, help_text="The groups that gave it")

    def __str__(self) -> str:
        return f"{self.membership} from {self.provider}"


class MembershipAudit(models.Model):
    """One change to a team's members or to a platform-admin grant: who (None = a provider's
    groups at sign-in or sync), whom, what, when."""

    at = models.DateTimeField(auto_now_add=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source = models.CharField(max_length=40, help_text="portal, or the provider that applied it")
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.SET_NULL)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    action = models.CharField(max_length=40)
    detail = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.action} {self.user} {self.team} {self.detail}"


class CliGrant(models.Model):
    """A one-time code that the portal gave a browser to hand to ``gpupool login`` on the
    same machine (the loopback flow, RFC 8252 with PKCE): traded once, within minutes, for a
    new API token, by whoever also holds the verifier whose S256 digest is ``code_challenge``.

    Only the code's SHA-256 digest is stored, as for API tokens: a copy of this table gives
    nobody a code. ``token`` is the API token the code was traded for, so that a second trade
    of the same code (someone else saw it) revokes that token too (RFC 6749, 4.1.2)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="cli_grants"
    )
    code_digest = models.CharField(max_length=64, unique=True)
    code_challenge = models.CharField(max_length=128)
    machine = models.CharField(max_length=64, help_text="The host name the CLI gave")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    token = models.ForeignKey(
        "portal.ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"CLI on {self.machine} for {self.user} ({self.created_at:%Y-%m-%d %H:%M})"


class Invitation(models.Model):
    """A team admin's invitation for someone without an account yet (or whose username they
    do not know): a link mailed to ``email`` that makes its opener, once signed in, a member
    of ``team`` with ``role``. Whoever signs in with that e-mail address (set by the identity
    provider or an administrator, or verified) joins as well, link or not. Only a hash of the
    link's token is kept; the link works once, until ``expires_at``."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField(max_length=254)
    role = models.CharField(max_length=16, default="member")
    token_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256, hex")
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["email"], name="invitation_email")]

    def __str__(self) -> str:
        return f"{self.email} to {self.team_id} as {self.role}"
