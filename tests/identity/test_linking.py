"""The linking rule against the real slapd and the real OpenID provider: a sign-in reaches an
account only through a stored link to the provider's stable id, never by a matching name or
e-mail; local accounts with a password are never signed in, changed or disabled by a provider
or a sync; one lockout count per account whatever the case of its name; claims checked like
form input."""

from __future__ import annotations

import itertools

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.core.management import call_command

from identity.ldap_sync import ldap_sync
from identity.models import ExternalIdentity, GroupRule, MembershipAudit
from portal.models import Membership, Role
from portal.tokens import api_token_create
from tests.factories import MembershipFactory, UserFactory
from tests.identity.flows import sign_in

pytestmark = pytest.mark.django_db

User = get_user_model()
_names = itertools.count()


def _log_in(client, username: str, password: str, address: str = "10.1.0.1"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def _fresh(stem: str) -> str:
    """A name no earlier test used (the directory lives for the whole session)."""
    return f"{stem}{next(_names)}"


@pytest.fixture
def local_admin(vision):
    """A local superuser and team admin of Vision with a password and an e-mail of its own:
    the break-glass account an attacker's directory entry would like to become."""
    user = UserFactory(
        username=_fresh("admin"), email="ops@portal.example", is_staff=True, is_superuser=True
    )
    MembershipFactory(user=user, team=vision, role=Role.ADMIN)
    return user


def test_a_directory_entry_with_a_local_accounts_name_gets_an_account_of_its_own(
    client, ldap_settings, local_admin, vision
):
    name = local_admin.username
    ldap_settings.add_user(name, "directory-chosen-pw", mail="evil@ldap.example.org")
    GroupRule.objects.create(pattern="*", team=vision, role="viewer", provider="ldap")

    response = _log_in(client, name, "directory-chosen-pw")

    assert response.status_code == 302, response.content[:400]
    signed_in = User.objects.get(pk=client.session["_auth_user_id"])
    assert signed_in.pk != local_admin.pk and signed_in.username == f"{name}-2"
    assert not signed_in.is_staff and not signed_in.has_usable_password()
    assert client.get("/admin/").status_code == 302  # to the admin's login: not a superuser
    local_admin.refresh_from_db()
    assert local_admin.email == "ops@portal.example"  # never the directory's
    assert local_admin.check_password("pw-for-tests") and local_admin.is_active
    assert Membership.objects.get(user=local_admin, team=vision).role == Role.ADMIN
    link = ExternalIdentity.objects.get(user=signed_in)
    assert link.provider == "ldap" and link.subject.startswith("entryuuid:")
    assert not ExternalIdentity.objects.filter(user=local_admin).exists()


def test_the_sync_never_disables_a_local_account_whatever_the_directory_holds(
    client, ldap_settings, local_admin
):
    name = local_admin.username
    dn = ldap_settings.add_user(name, "directory-chosen-pw")
    _log_in(client, name, "directory-chosen-pw")
    namesake = User.objects.get(username=f"{name}-2")
    _, raw = api_token_create(user=local_admin, name="break-glass")

    ldap_settings.delete(dn)
    counts = ldap_sync()

    local_admin.refresh_from_db()
    namesake.refresh_from_db()
    assert local_admin.is_active and not namesake.is_active
    assert counts["disabled"] == 1
    api = client_for_token(raw)
    assert api.get("/api/v1/jobs/").status_code == 200
    assert _log_in(client, name, "pw-for-tests", address="10.1.0.2").status_code == 302


def client_for_token(raw: str):
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return api


def test_a_link_made_by_hand_to_a_local_account_still_signs_nobody_in(
    client, ldap_settings, local_admin
):
    """Even an admin's mistake (a link to an account with a password) opens nothing."""
    name = local_admin.username
    ldap_settings.add_user(name, "directory-chosen-pw")
    _log_in(client, name, "directory-chosen-pw")
    link = ExternalIdentity.objects.get(user__username=f"{name}-2")
    link.user = local_admin
    link.save()
    client.logout()

    response = _log_in(client, name, "directory-chosen-pw", address="10.1.0.3")

    assert response.status_code == 200  # the form again
    assert "_auth_user_id" not in client.session
    assert ldap_sync()["disabled"] == 0
    local_admin.refresh_from_db()
    assert local_admin.is_active


def test_refusing_name_collisions_says_why_and_makes_no_account(
    client, settings, ldap_settings, local_admin
):
    settings.GPUPOOL_EXTERNAL_NAME_COLLISION = "refuse"
    name = local_admin.username
    ldap_settings.add_user(name, "directory-chosen-pw")

    response = _log_in(client, name, "directory-chosen-pw")

    assert response.status_code == 200
    page = response.content.decode()
    assert "belongs to another portal account" in page and "platform admin" in page
    assert not User.objects.filter(username=f"{name}-2").exists()
    assert not ExternalIdentity.objects.filter(provider="ldap", user=local_admin).exists()


def test_the_link_follows_the_entry_through_a_rename_and_not_the_name(client, ldap_settings):
    first = _fresh("rita")
    ldap_settings.add_user(first, "ldap-pw")
    _log_in(client, first, "ldap-pw")
    rita = User.objects.get(username=first)
    client.logout()

    renamed = _fresh("rita-renamed")
    ldap_settings.rename(first, renamed)
    ldap_settings.add_user(first, "someone-elses-pw")  # the old name, now another person
    assert ldap_sync()["disabled"] == 0
    rita.refresh_from_db()
    assert rita.is_active

    _log_in(client, renamed, "ldap-pw", address="10.1.0.4")
    assert client.session["_auth_user_id"] == str(rita.pk)  # same entry, same account
    client.logout()
    _log_in(client, first, "someone-elses-pw", address="10.1.0.5")
    assert client.session["_auth_user_id"] != str(rita.pk)  # same name, another entry


def test_a_link_from_before_stable_ids_is_moved_to_the_entry_at_the_next_sign_in(
    client, ldap_settings
):
    name = _fresh("leo")
    ldap_settings.add_user(name, "ldap-pw")
    leo = User.objects.create_user(username=name)  # made by LDAP then: no password
    ExternalIdentity.objects.create(user=leo, provider="ldap", subject=f"legacy:{name}")

    assert _log_in(client, name, "ldap-pw").status_code == 302

    assert client.session["_auth_user_id"] == str(leo.pk)
    assert ExternalIdentity.objects.get(user=leo).subject.startswith("entryuuid:")


def test_without_an_id_attribute_the_entrys_dn_is_the_link(client, settings, ldap_settings):
    settings.GPUPOOL_LDAP_ID_ATTRIBUTE = ""
    name = _fresh("dina")
    dn = ldap_settings.add_user(name, "ldap-pw")
    assert _log_in(client, name, "ldap-pw").status_code == 302
    assert ExternalIdentity.objects.get(user__username=name).subject == f"dn:{dn.lower()}"
    ldap_settings.delete(dn)
    assert ldap_sync()["disabled"] == 1


def test_a_directory_e_mail_that_another_account_has_is_not_taken(client, ldap_settings, bob):
    bob.email = "bob@portal.example"
    bob.save()
    name = _fresh("mallory")
    ldap_settings.add_user(name, "ldap-pw", mail="BOB@portal.example")

    assert _log_in(client, name, "ldap-pw").status_code == 302

    assert User.objects.get(username=name).email == ""
    assert User.objects.filter(email__iexact="bob@portal.example").count() == 1


def test_case_variants_of_a_name_share_one_account_and_one_lockout(client, settings, ldap_settings):
    settings.AXES_FAILURE_LIMIT = 3
    name = _fresh("lars")
    ldap_settings.add_user(name, "ldap-pw")
    assert _log_in(client, name, "ldap-pw").status_code == 302
    lars = User.objects.get(username=name)
    client.logout()
    assert _log_in(client, name.upper(), "ldap-pw", address="10.2.0.1").status_code == 302
    assert client.session["_auth_user_id"] == str(lars.pk)  # LARS is lars
    client.logout()

    for i, spelling in enumerate([name, name.upper()]):
        assert _log_in(client, spelling, "wrong", address=f"10.3.0.{i}").status_code == 200
    assert _log_in(client, f" {name.title()} ", "wrong", address="10.3.0.9").status_code == 429
    locked = _log_in(client, name.upper(), "ldap-pw", address="10.4.0.1")

    assert locked.status_code == 429 and "Too many failed logins" in locked.content.decode()
    assert "_auth_user_id" not in client.session
    assert set(AccessAttempt.objects.values_list("username", flat=True)) == {name}


# ---------------------------------------------------------------------------------------------
# OpenID Connect: claims are anyone's words
# ---------------------------------------------------------------------------------------------
def test_an_oidc_user_named_like_a_local_account_gets_an_account_of_its_own(
    client, oidc_settings, local_admin
):
    oidc_settings.set_user(local_admin.username, groups=[], email="ops@portal.example")

    assert sign_in(client, local_admin.username).status_code == 302

    signed_in = User.objects.get(pk=client.session["_auth_user_id"])
    assert signed_in.username == f"{local_admin.username}-2" and not signed_in.is_staff
    assert signed_in.email == ""  # the local admin's address is not taken over
    local_admin.refresh_from_db()
    assert local_admin.email == "ops@portal.example" and local_admin.check_password("pw-for-tests")


def test_oidc_claims_with_control_characters_are_not_stored(client, oidc_settings):
    login = _fresh("claire")
    oidc_settings.set_user(
        login,
        groups=[],
        email=f"{login}@example.org\r\nBcc: victim@example.org",
        name="Claire\u202e\x00 Example",
    )

    assert sign_in(client, login).status_code == 302

    user = User.objects.get(username=login)
    assert user.email == ""
    assert (user.first_name, user.last_name) == ("Claire", "Example")


def test_an_oidc_e_mail_claim_that_is_no_address_is_not_stored(client, oidc_settings):
    login = _fresh("nora")
    oidc_settings.set_user(login, groups=[], email="not an address")
    assert sign_in(client, login).status_code == 302
    assert User.objects.get(username=login).email == ""


def test_a_later_sign_in_does_not_take_an_e_mail_another_account_has(client, oidc_settings, bob):
    bob.email = "bob@portal.example"
    bob.save()
    login = _fresh("otto")
    oidc_settings.set_user(login, groups=[])
    sign_in(client, login)
    client.logout()
    oidc_settings.set_user(login, groups=[], email="bob@portal.example")

    sign_in(client, login)

    assert User.objects.get(username=login).email == f"{login}@example.org"  # unchanged
    assert MembershipAudit.objects.filter(action="account-disabled").count() == 0


def test_the_ldap_sync_command_reports_skipped_links(ldap_settings, local_admin, capsys):
    ExternalIdentity.objects.create(user=local_admin, provider="ldap", subject="legacy:x")
    call_command("ldap_sync")
    assert "skipped: 1" in capsys.readouterr().out
