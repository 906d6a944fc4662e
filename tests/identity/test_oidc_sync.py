"""The OpenID Connect sync against the real provider (oidc-provider under Node): a sign-in
with offline_access keeps a sealed refresh token; the sync trades it, re-applies the groups the
provider now gives, and disables an account the provider deleted or disabled (its API tokens
and session stop working); users without a refresh token, and an unreachable provider, are
left alone."""

from __future__ import annotations

import io
import logging

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from clusters.secrets import text_open, text_seal
from identity.models import ExternalIdentity, GroupRule, MembershipAudit
from identity.oidc_sync import oidc_sync
from portal.models import Membership, Role
from portal.tokens import api_token_create
from tests.identity.flows import sign_in
from tests.identity.servers import free_port

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.fixture
def rules(vision, language):
    GroupRule.objects.create(pattern="gpu-vision-*", team=vision, role="member")
    GroupRule.objects.create(pattern="gpu-vision-admins", team=vision, role="admin")
    GroupRule.objects.create(pattern="gpu-language-readers", team=language, role="viewer")


def _roles(user) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("team__slug", "role"))


def _api(client, raw: str) -> int:
    return client.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code


def test_the_sync_applies_the_groups_the_provider_gives_now(client, oidc_settings, rules):
    oidc_settings.set_user("sam", groups=["gpu-vision-users"])
    assert sign_in(client, "sam").status_code == 302
    user = User.objects.get(username="sam")
    identity = ExternalIdentity.objects.get(user=user)
    sealed = identity.refresh_token_sealed
    assert sealed.startswith("gAAAA")  # a Fernet token, not the refresh token itself
    assert text_open(sealed) and text_open(sealed) not in sealed
    assert _roles(user) == {"vision": Role.MEMBER}
    admin = User.objects.create_superuser("root-sam", "root@example.org", "pw")
    client.force_login(admin)
    page = client.get(f"/admin/identity/externalidentity/{identity.pk}/change/")
    assert page.status_code == 200 and b"sam" in page.content
    assert sealed.encode() not in page.content and text_open(sealed).encode() not in page.content

    oidc_settings.set_user("sam", groups=["gpu-vision-admins", "gpu-language-readers"])
    out = io.StringIO()
    call_command("oidc_sync", stdout=out)  # what beat's task runs, by hand
    assert "synced: 1" in out.getvalue() and "disabled: 0" in out.getvalue()
    assert _roles(user) == {"vision": Role.ADMIN, "language": Role.VIEWER}
    identity.refresh_from_db()
    assert identity.last_sync_at is not None
    assert identity.groups == ["gpu-language-readers", "gpu-vision-admins"]
    assert set(
        MembershipAudit.objects.filter(user=user, source="oidc:testidp").values_list(
            "action", flat=True
        )
    ) == {"member-added", "role-changed"}

    oidc_settings.set_user("sam", groups=[])
    assert oidc_sync()["changes"] == 2  # removed from both teams
    assert _roles(user) == {}
    user.refresh_from_db()
    assert user.is_active


@pytest.mark.parametrize("how", ["removed", "disabled"])
def test_an_account_gone_at_the_provider_loses_its_tokens_at_the_sync(
    client, oidc_settings, rules, how
):
    login = f"gone-{how}"
    oidc_settings.set_user(login, groups=["gpu-vision-users"])
    sign_in(client, login)
    user = User.objects.get(username=login)
    _, raw = api_token_create(user=user, name="ci")
    assert _api(client, raw) == 200 and client.get("/jobs/").status_code == 200

    if how == "removed":
        oidc_settings.remove_user(login)
    else:
        oidc_settings.disable_user(login)
    counts = oidc_sync()
    assert counts["disabled"] == 1 and counts["synced"] == 0

    user.refresh_from_db()
    assert not user.is_active
    assert _api(client, raw) == 401
    assert client.get("/jobs/").status_code == 302  # the session ended with the account
    audit = MembershipAudit.objects.get(user=user, action="account-disabled")
    assert audit.source == "oidc:testidp" and "invalid_grant" in audit.detail
    assert ExternalIdentity.objects.get(user=user).refresh_token_sealed == ""
    assert oidc_sync()["disabled"] == 0  # a disabled account is not tried again


def test_users_without_a_refresh_token_are_left_alone_and_logged(
    client, settings, oidc_idp, rules, caplog
):
    settings.GPUPOOL_OIDC_PROVIDERS = [{**oidc_idp.settings_entry(), "offline_access": False}]
    oidc_idp.set_user("una", groups=["gpu-vision-users"])
    sign_in(client, "una")
    user = User.objects.get(username="una")
    assert ExternalIdentity.objects.get(user=user).refresh_token_sealed == ""

    oidc_idp.remove_user("una")
    with caplog.at_level(logging.INFO, logger="identity.oidc_sync"):
        counts = oidc_sync()
    assert counts["skipped"] == 1 and counts["disabled"] == 0
    assert "una at testidp has no refresh token" in caplog.text
    user.refresh_from_db()
    assert user.is_active and _roles(user) == {"vision": Role.MEMBER}


def test_an_unreachable_provider_disables_nobody(settings, oidc_idp, bob, caplog):
    entry = {**oidc_idp.settings_entry("downidp"), "issuer": f"http://127.0.0.1:{free_port()}"}
    settings.GPUPOOL_OIDC_PROVIDERS = [entry]
    bob.set_unusable_password()  # an account the provider made: one the sync may act on
    bob.save()
    ExternalIdentity.objects.create(
        user=bob, provider="oidc:downidp", subject="bob", refresh_token_sealed=text_seal("rt")
    )
    with caplog.at_level(logging.WARNING, logger="identity.oidc_sync"):
        counts = oidc_sync()
    assert counts["failed"] == 1 and counts["disabled"] == 0
    bob.refresh_from_db()
    assert bob.is_active
    assert "rt" not in caplog.text.replace("rt at", "")  # never the token in a log line
