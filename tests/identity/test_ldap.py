"""LDAP sign-in and the periodic sync against a real OpenLDAP (slapd, users and groups from
LDIF): the account made at the first sign-in, groups mapped to teams, a group change seen at
the next sign-in or sync, and an account gone from the directory disabled with its tokens."""

from __future__ import annotations

import io
import itertools

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from identity.ldap_sync import ldap_sync
from identity.models import ExternalIdentity, GroupRule, MembershipAudit
from portal.models import Membership, Role
from portal.tokens import api_token_create

pytestmark = pytest.mark.django_db

User = get_user_model()
_names = itertools.count()


@pytest.fixture
def directory(ldap_settings, vision, language):
    """A fresh user in a vision group and a language group of their own (unique names, since
    the directory lives for the whole session)."""
    n = next(_names)
    uid, vision_group, language_group = f"lena{n}", f"gpu-vision-users-{n}", f"gpu-lang-{n}"
    ldap_settings.add_user(uid, "ldap-pw")
    ldap_settings.add_group(vision_group, [uid])
    ldap_settings.add_group(language_group, [])
    GroupRule.objects.create(pattern="gpu-vision-users-*", team=vision, role="member")
    GroupRule.objects.create(pattern="gpu-lang-*", team=language, role="admin", provider="ldap")
    GroupRule.objects.create(pattern="gpu-lang-*", team=vision, role="viewer", provider="oidc:x")
    return ldap_settings, uid, vision_group, language_group


def _log_in(client, username: str, password: str):
    return client.post("/login/", {"username": username, "password": password})


def test_first_ldap_sign_in_creates_the_account_with_its_teams(client, directory, vision):
    _, uid, vision_group, _ = directory
    response = _log_in(client, uid, "ldap-pw")
    assert response.status_code == 302, response.content[:400]
    user = User.objects.get(username=uid)
    assert user.email == f"{uid}@ldap.example.org"
    assert ExternalIdentity.objects.get(user=user).groups == [vision_group]
    membership = Membership.objects.get(user=user)
    assert (membership.team, membership.role) == (vision, Role.MEMBER)
    assert membership.provider_mark.provider == "ldap"


def test_a_wrong_ldap_password_is_refused(client, directory):
    _, uid, _, _ = directory
    assert _log_in(client, uid, "not-it").status_code == 200  # the form again, with its error
    assert not User.objects.filter(username=uid).exists()


def test_group_changes_apply_at_the_next_sign_in(client, directory, vision, language):
    slapd, uid, vision_group, language_group = directory
    _log_in(client, uid, "ldap-pw")
    slapd.group_member(vision_group, uid, present=False)
    slapd.group_member(language_group, uid, present=True)
    client.logout()
    _log_in(client, uid, "ldap-pw")
    roles = dict(Membership.objects.filter(user__username=uid).values_list("team__slug", "role"))
    assert roles == {language.slug: Role.ADMIN}  # the oidc:x rule is another provider's


def test_the_sync_applies_group_changes_and_disables_accounts_gone(client, directory, vision):
    slapd, uid, vision_group, language_group = directory
    _log_in(client, uid, "ldap-pw")
    user = User.objects.get(username=uid)
    Membership.objects.create(
        user=user,
        team=vision.__class__.objects.create(name=f"Hand {uid}", slug=f"hand-{uid}"),
        role=Role.MEMBER,
    )
    _, raw = api_token_create(user=user, name="ci")
    slapd.group_member(language_group, uid, present=True)
    slapd.group_member(vision_group, uid, present=False)

    counts = ldap_sync()
    assert counts["synced"] >= 1 and counts["disabled"] == 0
    roles = dict(Membership.objects.filter(user=user).values_list("team__slug", "role"))
    assert roles == {"language": Role.ADMIN, f"hand-{uid}": Role.MEMBER}
    assert ExternalIdentity.objects.get(user=user).last_sync_at is not None

    slapd.delete(f"uid={uid},ou=people,dc=gpupool,dc=test")
    out = io.StringIO()
    call_command("ldap_sync", stdout=out)  # what beat's task runs, by hand
    assert "disabled: 1" in out.getvalue()
    user.refresh_from_db()
    assert not user.is_active
    assert MembershipAudit.objects.filter(user=user, action="account-disabled").exists()
    assert client.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401
    assert client.get("/jobs/").status_code == 302  # the session ended with the account


def test_the_sync_does_nothing_without_ldap(settings, db):
    settings.AUTH_LDAP_SERVER_URI = ""
    assert ldap_sync() == {"synced": 0, "disabled": 0, "changes": 0, "skipped": 0}
