"""Team admins manage their own team's members in the portal: add, change a role, remove;
memberships from a provider's groups are shown but follow the rules; another team is a 404;
bad input is a 400 naming the field with nothing stored; every change audited."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from identity.models import MembershipAudit, ProviderMembership
from portal.models import Membership, Role

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.fixture
def admin_client(client, alice):
    client.force_login(alice)
    return client


def _members(team) -> dict[str, str]:
    return dict(Membership.objects.filter(team=team).values_list("user__username", "role"))


def test_a_team_admin_adds_changes_and_removes_members(admin_client, alice, vision, charlie):
    url = f"/teams/{vision.slug}/members/"
    page = admin_client.get(url)
    assert page.status_code == 200 and b"alice" in page.content
    assert (
        admin_client.post(url, {"action": "add", "username": "charlie", "role": "viewer"})[
            "Location"
        ]
        == url
    )
    assert _members(vision)["charlie"] == Role.VIEWER
    membership = Membership.objects.get(team=vision, user=charlie)
    admin_client.post(url, {"action": "role", "membership": membership.pk, "role": "member"})
    assert _members(vision)["charlie"] == Role.MEMBER
    admin_client.post(url, {"action": "remove", "membership": membership.pk})
    assert "charlie" not in _members(vision)
    assert list(
        MembershipAudit.objects.filter(team=vision, actor=alice)
        .order_by("id")
        .values_list("action", "detail")
    ) == [
        ("member-added", "viewer"),
        ("role-changed", "viewer → member"),
        ("member-removed", "member"),
    ]


def test_bad_input_is_a_400_naming_the_field(admin_client, vision, charlie):
    url = f"/teams/{vision.slug}/members/"
    response = admin_client.post(url, {"action": "add", "username": "charlie", "role": "owner"})
    assert response.status_code == 400 and b"role:" in response.content
    response = admin_client.post(url, {"action": "add", "username": "nobody", "role": "member"})
    assert response.status_code == 400 and b"username:" in response.content
    assert "charlie" not in _members(vision) and not MembershipAudit.objects.exists()


def test_provider_memberships_are_not_edited_by_hand(admin_client, vision, charlie):
    membership = Membership.objects.create(team=vision, user=charlie, role=Role.MEMBER)
    ProviderMembership.objects.create(membership=membership, provider="ldap", groups=["g"])
    url = f"/teams/{vision.slug}/members/"
    assert b"follows the group rules" in admin_client.get(url).content
    response = admin_client.post(url, {"action": "remove", "membership": membership.pk})
    assert response.status_code == 400 and b"membership:" in response.content
    assert _members(vision)["charlie"] == Role.MEMBER


def test_members_and_other_teams_cannot_manage(client, victor, alice, vision, language):
    client.force_login(victor)  # a viewer of vision, not its admin
    assert client.get(f"/teams/{vision.slug}/members/").status_code == 404
    client.force_login(alice)  # vision's admin, nothing in language
    assert client.get(f"/teams/{language.slug}/members/").status_code == 404
    assert (
        client.post(
            f"/teams/{language.slug}/members/",
            {"action": "add", "username": "victor", "role": "admin"},
        ).status_code
        == 404
    )
    assert "victor" not in _members(language)


def test_the_nav_shows_my_teams_to_team_admins_only(client, victor, alice):
    client.force_login(victor)
    assert b"My teams" not in client.get("/jobs/").content
    client.force_login(alice)
    assert b"My teams" in client.get("/jobs/").content
    assert b"/teams/vision/members/" in client.get("/teams/").content
