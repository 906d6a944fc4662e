"""The delivery log says why a webhook delivery failed as a category ("connection refused",
"HTTP 500", "TLS error" …), on the page and over REST, never in the remote's words; the detail
is in the server log. Real receivers (or nothing listening), no mocked HTTP. And a webhook id
that does not exist is a 404, never a 500."""

from __future__ import annotations

import importlib
import logging
import threading
from typing import Any

import pytest
from django.test import Client

from notifications.models import Delivery, TeamWebhook
from notifications.outbox import delivery_send
from notifications.webhooks import webhook_create
from portal.jobs.state import job_transition
from portal.models import JobState
from tests.factories import JobFactory
from tests.ports import free_port

pytestmark = pytest.mark.django_db

LEAK = "ERR invalid password for redis at 10.0.0.7:6379 (internal)"


def _delivery_of_a_failed_job(owner: Any, team: Any, capture: Any) -> Delivery:
    job = JobFactory(team=team, owner=owner, name="resnet", state=JobState.RUNNING)
    with capture(execute=True):
        job_transition(job_id=job.pk, expected=JobState.RUNNING, to=JobState.FAILED, reason="E")
    return Delivery.objects.get(channel="webhook")


def _logged_error(api: Any) -> dict[str, Any]:
    rows = api.get("/api/v1/notification-deliveries/").json()["results"]
    [row] = [r for r in rows if r["channel"] == "webhook"]  # the owner's email is another
    return {k: row[k] for k in ("channel", "state", "error", "error_status", "last_error")}


def test_an_error_answer_shows_as_its_status_and_its_body_only_in_the_server_log(
    api_as, alice, vision, receiver, caplog, django_capture_on_commit_callbacks
):
    _, receiver.secret = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed"]
    )
    receiver.statuses = [500]
    receiver.answer_body = LEAK.encode()
    delivery = _delivery_of_a_failed_job(alice, vision, django_capture_on_commit_callbacks)
    with caplog.at_level(logging.WARNING, logger="notifications.outbox"):
        assert delivery_send(delivery.pk) == "pending"

    assert _logged_error(api_as(alice)) == {
        "channel": "webhook",
        "state": "pending",
        "error": "http",
        "error_status": 500,
        "last_error": "HTTP 500 (error inside the receiver)",
    }
    client = Client()
    client.force_login(alice)
    page = client.get("/settings/notifications/").content.decode()
    assert "<td>HTTP 500 (error inside the receiver)</td>" in page
    assert "redis" not in page and "10.0.0.7" not in page
    assert LEAK not in str(api_as(alice).get("/api/v1/notification-deliveries/").json())
    # The operators keep the whole story.
    assert (
        "ERR invalid password for redis" in caplog.text and f"delivery {delivery.pk}" in caplog.text
    )


def test_nothing_listening_shows_as_connection_refused(
    api_as, alice, vision, django_capture_on_commit_callbacks
):
    webhook_create(
        team=vision,
        by=alice,
        name="closed",
        url=f"http://127.0.0.1:{free_port()}/hook",  # nothing listens there
        events=["job.failed"],
    )
    delivery = _delivery_of_a_failed_job(alice, vision, django_capture_on_commit_callbacks)
    assert delivery_send(delivery.pk) == "pending"  # retried: it may come up
    got = _logged_error(api_as(alice))
    assert (got["error"], got["error_status"], got["last_error"]) == (
        "refused",
        None,
        "connection refused",
    )


def test_https_to_a_plain_http_port_shows_as_a_tls_error(
    api_as, alice, vision, receiver, django_capture_on_commit_callbacks
):
    webhook_create(
        team=vision,
        by=alice,
        name="tls",
        url=f"https://127.0.0.1:{receiver.port}/hook",
        events=["job.failed"],
    )
    delivery = _delivery_of_a_failed_job(alice, vision, django_capture_on_commit_callbacks)
    assert delivery_send(delivery.pk) == "pending"
    assert _logged_error(api_as(alice))["last_error"] == "TLS error"


def test_a_receiver_that_does_not_answer_in_time_shows_as_timed_out(
    api_as, alice, vision, receiver, settings, django_capture_on_commit_callbacks
):
    settings.GPUPOOL_WEBHOOK_TIMEOUT_SECONDS = 1
    _, receiver.secret = webhook_create(
        team=vision, by=alice, name="slow", url=receiver.url, events=["job.failed"]
    )
    receiver.hold = threading.Event()
    delivery = _delivery_of_a_failed_job(alice, vision, django_capture_on_commit_callbacks)
    assert delivery_send(delivery.pk) == "pending"
    receiver.hold.set()
    assert _logged_error(api_as(alice))["last_error"] == "timed out"


def test_a_host_that_no_longer_resolves_shows_as_dns_and_is_tried_again(
    api_as, alice, vision, django_capture_on_commit_callbacks
):
    # Saved when it resolved; ``.invalid`` never does (RFC 6761).
    TeamWebhook.objects.create(
        team=vision,
        name="gone",
        url="https://hooks.gpupool-test.invalid/hook",
        events=["job.failed"],
        secret="unused",
        secret_hint="…",
    )
    delivery = _delivery_of_a_failed_job(alice, vision, django_capture_on_commit_callbacks)
    assert delivery_send(delivery.pk) == "pending"
    assert _logged_error(api_as(alice))["last_error"] == "host name does not resolve"


def _category_of(old_text: str) -> tuple[str, int | None]:
    """What the data migration makes of a row's old error text (a module name that starts
    with a digit cannot be imported by name)."""
    migration = importlib.import_module("notifications.migrations.0002_delivery_error_category")
    return migration.category_of(old_text)


@pytest.mark.parametrize(
    ("old", "category"),
    [
        ("", ("", None)),
        ("the webhook answered 503", ("http", 503)),
        ("the webhook did not answer: ConnectionError", ("connection", None)),
        ("the webhook did not answer: ReadTimeout", ("timeout", None)),
        ("the webhook did not answer: SSLError", ("tls", None)),
        (
            "the webhook URL is refused: hooks.example.org resolves to 10.0.0.7, which is a "
            "private address and private cluster addresses are switched off",
            ("blocked", None),
        ),
        ("the webhook URL is refused: x.example does not resolve (…)", ("dns", None)),
        ("the mail server refused or did not answer: (550, b'no such user')", ("mail", None)),
        ("your account has no email address", ("no_email", None)),
        ("the worker stopped while sending; not sent again, …", ("worker_stopped", None)),
        ("something new", ("other", None)),
    ],
)
def test_rows_written_before_keep_only_the_category_of_their_text(old, category):
    assert _category_of(old) == category


def test_a_webhook_that_does_not_exist_is_a_404_on_the_page_and_over_rest(
    api_as, alice, charlie, vision, receiver
):
    client = Client()
    client.force_login(alice)
    for missing in ("999999", "99999999999999999999"):  # the second is past bigint
        assert client.post(f"/teams/vision/webhooks/{missing}/delete/").status_code == 404
        assert api_as(alice).delete(f"/api/v1/teams/vision/webhooks/{missing}/").status_code == (
            404
        )
    hook, _ = webhook_create(team=vision, by=alice, name="ci", url=receiver.url)
    other = Client()
    other.force_login(charlie)  # another team's admin
    assert other.post(f"/teams/vision/webhooks/{hook.pk}/delete/").status_code == 404
    assert client.post(f"/teams/vision/webhooks/{hook.pk}/delete/").status_code == 302
    assert client.post(f"/teams/vision/webhooks/{hook.pk}/delete/").status_code == 404  # twice
    assert not TeamWebhook.objects.exists()
