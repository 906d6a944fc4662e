"""A team admin adds members by searching known accounts or invites someone by e-mail (a
real SMTP server receives the link); the invitee joins by opening it signed in, or by
signing in with the invited address. Search shows no e-mail and never another team's
admin page; an invitation link works once."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from identity.models import Invitation
from portal.models import Membership, Role
from tests.factories import UserFactory
from tests.notifications.conftest import smtp_server  # noqa: F401  (a real SMTP server)

pytestmark = pytest.mark.django_db


def _as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_search_finds_accounts_not_in_the_team_and_adds_one(alice, bob, vision, charlie):
    UserFactory(username="dana", first_name="Dana", last_name="Scully", email="d@example.org")
    UserFactory(username="dan-gone", is_active=False)
    client = _as(alice)
    html = client.get("/teams/vision/members/?q=dan").content.decode()
    assert 'data-account="dana"' in html and "Dana Scully" in html
    assert "d@example.org" not in html  # usernames and names only
    assert "dan-gone" not in html
    # bob is in Vision already: not offered
    assert 'data-account="bob"' not in client.get("/teams/vision/members/?q=bo").content.decode()
    client.post("/teams/vision/members/", {"action": "add", "username": "dana", "role": "member"})
    assert Membership.objects.filter(team=vision, user__username="dana").exists()


def test_another_teams_admin_cannot_search_or_add_into_vision(alice, vision, charlie, language):
    UserFactory(username="dana")
    client = _as(charlie)
    assert client.get("/teams/vision/members/?q=dan").status_code == 404
    client.post("/teams/vision/members/", {"action": "add", "username": "dana", "role": "admin"})
    assert not Membership.objects.filter(team=vision, user__username="dana").exists()
    client.post("/teams/vision/members/", {"action": "invite", "email": "x@example.org"})
    assert not Invitation.objects.exists()


def test_an_invitation_is_mailed_and_the_link_makes_its_opener_a_member(
    alice,
    vision,
    smtp_server,  # noqa: F811
):
    page = _as(alice).post(
        "/teams/vision/members/",
        {"action": "invite", "email": "new.person@example.org", "role": "member"},
    )
    assert page.status_code == 200
    html = page.content.decode()
    assert "We e-mailed an invitation to new.person@example.org" in html
    link = re.search(r'<code id="invitation-link">([^<]+)</code>', html).group(1)
    [mail] = smtp_server.wait_for(1)
    assert mail["To"] == "new.person@example.org" and link in mail.get_payload()
    invitation = Invitation.objects.get()
    assert link.rsplit("/", 2)[-2] not in invitation.token_hash  # only a hash is kept

    newcomer = UserFactory(username="newcomer")  # signs in under another address
    path = link.split("testserver", 1)[1]
    anonymous = Client().get(path)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    as_newcomer = _as(newcomer)
    shown = as_newcomer.get(path).content.decode()  # which team and role, then a button
    assert "Join Vision" in shown and "as <strong>member</strong>" in shown
    assert not Membership.objects.filter(team=vision, user=newcomer).exists()
    answer = as_newcomer.post(path, follow=True)
    assert "You are in team Vision." in answer.content.decode()
    assert Membership.objects.get(team=vision, user=newcomer).role == Role.MEMBER
    again = _as(UserFactory(username="late")).post(path, follow=True)
    assert "was used or is unknown" in again.content.decode()
    assert not Membership.objects.filter(team=vision, user__username="late").exists()


def test_an_account_with_the_invited_address_joins_only_through_the_link(
    alice,
    vision,
    smtp_server,  # noqa: F811
):
    """An address on an account proves nothing (a provider may pass one its user typed): the
    link mailed to it does."""
    answer = _as(alice).post(
        "/teams/vision/members/",
        {"action": "invite", "email": "Erin@Example.org", "role": "viewer"},
    )
    html = answer.content.decode()
    link = re.search(r'<code id="invitation-link">([^<]+)</code>', html).group(1)
    erin = UserFactory(username="erin", email="erin@example.org")
    erin.set_password("pw-for-tests")
    erin.save()
    client = Client()
    client.post("/login/", {"username": "erin", "password": "pw-for-tests"})
    assert not Membership.objects.filter(team=vision, user=erin).exists()
    client.post(link.split("testserver", 1)[1])
    assert Membership.objects.get(team=vision, user=erin).role == Role.VIEWER
    assert Invitation.objects.get().accepted_by == erin


def test_a_bad_address_is_an_error_naming_the_field(alice, vision):
    page = _as(alice).post(
        "/teams/vision/members/", {"action": "invite", "email": "not-an-address", "role": "member"}
    )
    assert (
        page.status_code == 400 and "email: Enter a valid e-mail address." in page.content.decode()
    )
    assert not Invitation.objects.exists()


def test_a_withdrawn_invitation_no_longer_works_and_another_team_cannot_withdraw(
    alice,
    vision,
    charlie,
    language,
    smtp_server,  # noqa: F811
):
    html = (
        _as(alice)
        .post(
            "/teams/vision/members/",
            {"action": "invite", "email": "g@example.org", "role": "member"},
        )
        .content.decode()
    )
    path = re.search(r'<code id="invitation-link">https?://[^/]+([^<]+)</code>', html).group(1)
    invitation = Invitation.objects.get()
    _as(charlie).post(
        "/teams/language/members/", {"action": "withdraw", "invitation": str(invitation.pk)}
    )
    assert Invitation.objects.filter(pk=invitation.pk).exists()  # not Language's to withdraw
    _as(alice).post(
        "/teams/vision/members/", {"action": "withdraw", "invitation": str(invitation.pk)}
    )
    assert not Invitation.objects.exists()
    page = _as(UserFactory(username="g")).post(path, follow=True).content.decode()
    assert "was used or is unknown" in page
