"""Preferences, the delivery log and team webhooks over REST and on their pages: bad input is
a 400 naming the field with nothing stored; another team's webhooks are a 404, a member's try
a 403; the secret is shown once."""

from __future__ import annotations

import pytest
from django.test import Client

from notifications.models import Delivery, Preference, TeamWebhook
from portal.models import JobState
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def test_preferences_read_and_change_over_rest(api_as, bob):
    api = api_as(bob)
    got = api.get("/api/v1/notification-preferences/").json()
    assert got["wait_threshold_minutes"] == 60
    assert got["events"]["job.failed"] == ["email"] and got["events"]["job.running"] == []

    changed = api.put(
        "/api/v1/notification-preferences/",
        {"events": {"job.running": ["email"]}, "wait_threshold_minutes": 15},
        format="json",
    )
    assert changed.status_code == 200
    assert changed.json()["events"]["job.running"] == ["email"]
    assert changed.json()["events"]["job.failed"] == ["email"]  # left out: kept
    assert api.get("/api/v1/notification-preferences/").json()["wait_threshold_minutes"] == 15


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"events": {"job.exploded": ["email"]}}, "events"),
        ({"events": {"job.failed": ["pager"]}}, "events"),
        ({"events": ["job.failed"]}, "events"),
        ({"wait_threshold_minutes": 0}, "wait_threshold_minutes"),
        ({"wait_threshold_minutes": "soon"}, "wait_threshold_minutes"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_preferences_are_refused_naming_the_field(api_as, bob, body, field):
    answer = api_as(bob).put("/api/v1/notification-preferences/", body, format="json")
    assert answer.status_code == 400
    assert field in answer.json()["extra"]["fields"]
    assert not Preference.objects.filter(user=bob).exists()


def test_team_admins_manage_webhooks_and_see_the_secret_once(
    api_as, alice, bob, charlie, vision, receiver
):
    api = api_as(alice)
    made = api.post(
        "/api/v1/teams/vision/webhooks/",
        {"name": "ci", "url": receiver.url, "format": "slack", "events": ["job.failed"]},
        format="json",
    )
    assert made.status_code == 201
    secret = made.json()["secret"]
    assert made.json()["webhook"]["secret_hint"] == "…" + secret[-4:]
    listed = api.get("/api/v1/teams/vision/webhooks/").json()
    assert [w["name"] for w in listed] == ["ci"] and secret not in str(listed)

    assert api_as(bob).get("/api/v1/teams/vision/webhooks/").status_code == 403  # a member
    assert api_as(charlie).get("/api/v1/teams/vision/webhooks/").status_code == 404  # other team
    hook_id = listed[0]["id"]
    assert api_as(charlie).delete(f"/api/v1/teams/vision/webhooks/{hook_id}/").status_code == 404
    assert api.delete(f"/api/v1/teams/vision/webhooks/{hook_id}/").status_code == 204
    assert not TeamWebhook.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "url": "http://169.254.169.254/latest"}, "url"),
        ({"name": "x", "url": "https://127.0.0.1:8443/hook"}, "url"),
        ({"name": "x", "url": "ftp://example.org/"}, "url"),
        ({"name": "", "url": "https://203.0.113.5/hook"}, "name"),
        ({"name": "x", "url": "https://203.0.113.5/hook", "format": "teams"}, "format"),
        ({"name": "x", "url": "https://203.0.113.5/hook", "events": ["job.exploded"]}, "events"),
    ],
)
def test_bad_webhooks_are_refused_naming_the_field(api_as, alice, vision, settings, body, field):
    settings.GPUPOOL_WEBHOOK_ALLOW_LOCAL = False
    answer = api_as(alice).post("/api/v1/teams/vision/webhooks/", body, format="json")
    assert answer.status_code == 400, answer.json()
    assert field in answer.json()["extra"]["fields"]
    assert not TeamWebhook.objects.exists()


def test_the_delivery_log_shows_only_your_own(
    api_as, bob, charlie, vision, language, django_capture_on_commit_callbacks
):
    from portal.jobs.state import job_transition

    for owner, team in ((bob, vision), (charlie, language)):
        owner.email = f"{owner.username}@example.org"  # e-mail is off without an address
        owner.save()
        job = JobFactory(team=team, owner=owner, state=JobState.RUNNING)
        with django_capture_on_commit_callbacks(execute=True):
            job_transition(
                job_id=job.pk, expected=JobState.RUNNING, to=JobState.FAILED, reason="Error"
            )
    rows = api_as(bob).get("/api/v1/notification-deliveries/").json()["results"]
    assert [(r["kind"], r["channel"], r["state"]) for r in rows] == [
        ("job.failed", "email", "pending")
    ]
    assert Delivery.objects.count() == 2


def test_the_settings_page_saves_choices_and_refuses_a_bad_threshold(bob):
    client = Client()
    client.force_login(bob)
    page = client.get("/settings/notifications/")
    assert page.status_code == 200
    assert b'name="job.failed:email" value="1" checked' in page.content
    assert b"cluster.unreachable" not in page.content  # platform admins only

    saved = client.post(
        "/settings/notifications/", {"job.running:email": "1", "wait_threshold_minutes": "90"}
    )
    assert saved.status_code == 302
    prefs = client.get("/api/v1/notification-preferences/").json()
    assert prefs["events"]["job.running"] == ["email"]
    assert prefs["events"]["job.failed"] == []  # unticked
    assert prefs["wait_threshold_minutes"] == 90

    bad = client.post("/settings/notifications/", {"wait_threshold_minutes": "soon"})
    assert bad.status_code == 400 and b"wait_threshold_minutes" in bad.content
    assert Preference.objects.get(user=bob).wait_threshold_minutes == 90


def test_the_webhooks_page_shows_the_secret_once_and_only_to_team_admins(
    alice, bob, vision, receiver
):
    client = Client()
    client.force_login(alice)
    made = client.post(
        "/teams/vision/webhooks/", {"name": "ci", "url": receiver.url, "events": ["job.failed"]}
    )
    assert made.status_code == 200 and b'id="new-secret"' in made.content
    again = client.get("/teams/vision/webhooks/")
    assert b'id="new-secret"' not in again.content and b"ci" in again.content
    refused = client.post(
        "/teams/vision/webhooks/", {"name": "x", "url": "http://169.254.169.254/"}
    )
    assert refused.status_code == 400 and b"metadata" in refused.content
    assert TeamWebhook.objects.count() == 1

    member = Client()
    member.force_login(bob)
    assert member.get("/teams/vision/webhooks/").status_code == 403
    assert member.get("/teams/language/webhooks/").status_code == 404
