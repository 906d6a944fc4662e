"""The audit of a team's own templates and notification hooks: every create, edit and delete
by a team admin is recorded (who, what changed), never the webhook's secret; a personal
template is not the team's; the team's members page lists the changes."""

from __future__ import annotations

import pytest

from portal.models import TeamChange

pytestmark = pytest.mark.django_db

SPEC = {"image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "eval.py"]}


def _changes(team) -> list[tuple[str, str, str, str, str]]:
    return list(
        TeamChange.objects.filter(team=team)
        .order_by("id")
        .values_list("actor__username", "kind", "action", "subject", "detail")
    )


def test_team_template_changes_are_audited_with_what_changed(api_as, alice, bob, vision, catalog):
    api = api_as(alice)
    made = api.post(
        "/api/v1/templates/",
        {"name": "nightly", "scope": "team", "team": "vision", "spec": SPEC},
        format="json",
    )
    assert made.status_code == 201, made.json()
    url = f"/api/v1/templates/{made.json()['id']}/"
    changed = api.patch(
        url,
        {"name": "nightly eval", "spec": {**SPEC, "command": ["python", "eval2.py"]}},
        format="json",
    )
    assert changed.status_code == 200, changed.json()
    assert api.patch(url, {"name": "nightly eval"}, format="json").status_code == 200  # no change
    refused = api_as(bob).patch(url, {"name": "mine"}, format="json")  # a member: not theirs
    assert refused.status_code == 403
    assert api.delete(url).status_code == 204

    rows = _changes(vision)
    assert [r[:4] for r in rows] == [
        ("alice", "template", "created", "nightly"),
        ("alice", "template", "edited", "nightly eval"),
        ("alice", "template", "deleted", "nightly eval"),
    ]
    assert "spec.image: set to nvcr.io/nvidia/pytorch:24.05-py3" in rows[0][4]
    assert rows[1][4] == (
        'name: nightly → nightly eval; spec.command: ["python", "eval.py"] → ["python", "eval2.py"]'
    )


def test_personal_templates_are_not_the_teams(api_as, bob, vision, catalog):
    made = api_as(bob).post(
        "/api/v1/templates/",
        {"name": "mine", "scope": "personal", "team": "vision", "spec": SPEC},
        format="json",
    )
    assert made.status_code == 201
    assert not TeamChange.objects.exists()


def test_webhook_changes_are_audited_without_the_secret(api_as, alice, vision, receiver, client):
    api = api_as(alice)
    made = api.post(
        "/api/v1/teams/vision/webhooks/",
        {"name": "ci", "url": receiver.url, "format": "slack", "events": ["job.failed"]},
        format="json",
    )
    assert made.status_code == 201
    secret = made.json()["secret"]
    hook_id = made.json()["webhook"]["id"]
    bad = api.post(
        "/api/v1/teams/vision/webhooks/", {"name": "", "url": receiver.url}, format="json"
    )
    assert bad.status_code == 400  # refused: nothing stored, nothing audited
    assert api.delete(f"/api/v1/teams/vision/webhooks/{hook_id}/").status_code == 204

    rows = _changes(vision)
    assert [r[:4] for r in rows] == [
        ("alice", "webhook", "created", "ci"),
        ("alice", "webhook", "deleted", "ci"),
    ]
    assert f"url: set to {receiver.url}" in rows[0][4] and "events: set to" in rows[0][4]
    assert f"url: removed (was {receiver.url})" in rows[1][4]
    everything = " ".join(str(v) for r in TeamChange.objects.values() for v in r.values())
    assert secret not in everything and secret[-4:] not in everything

    client.force_login(alice)
    page = client.get("/teams/vision/members/").content.decode()
    assert "webhook created “ci”" in page and "webhook deleted “ci”" in page
    assert secret not in page


def test_the_web_pages_audit_too(client, alice, vision, receiver, catalog):
    client.force_login(alice)
    answer = client.post(
        "/teams/vision/webhooks/",
        {"name": "pager", "url": receiver.url, "format": "webhook", "events": ["job.failed"]},
    )
    assert answer.status_code == 200, answer.content[:500]
    hook = vision.webhooks.get()
    assert client.post(f"/teams/vision/webhooks/{hook.pk}/delete/").status_code == 302
    assert [r[2] for r in _changes(vision)] == ["created", "deleted"]


def test_another_teams_changes_are_not_shown(client, charlie, vision, language, alice):
    TeamChange.objects.create(
        team=vision, actor=alice, kind="template", action="created", subject="vision-only"
    )
    client.force_login(charlie)
    page = client.get(f"/teams/{language.slug}/members/").content.decode()
    assert "vision-only" not in page
    assert client.get(f"/teams/{vision.slug}/members/").status_code == 404
