"""Setting one's own e-mail address: the link mailed to it (a real SMTP server) is the only
way it becomes the account's; it works once, for its user, for a day; without an address no
e-mail delivery is written at all."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from notifications.addresses import (
    TOKEN_LIFETIME,
    email_address_remove,
    email_address_request,
    email_address_verify,
)
from notifications.models import Delivery, EmailVerification
from notifications.outbox import delivery_send
from portal.errors import ApplicationError
from portal.jobs.state import job_transition
from portal.models import JobState, Notification
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

LINK = "https://gpupool.test/settings/notifications/email/verify/{token}/"


def _token(mail) -> str:
    return re.search(r"/verify/([^/\s]+)/", mail.get_payload()).group(1)


def _fail(job) -> None:
    job_transition(
        job_id=job.pk, expected=job.state, to=JobState.FAILED, reason="OOMKilled", message="oom"
    )


def test_the_mailed_link_makes_the_address_the_accounts_once(bob, smtp_server):
    email_address_request(user=bob, address=" bob@example.org ", link_for=LINK)
    [mail] = smtp_server.wait_for(1)
    assert mail["To"] == "bob@example.org"
    assert "https://gpupool.test/settings/notifications/email/verify/" in mail.get_payload()
    token = _token(mail)
    assert token not in EmailVerification.objects.get(user=bob).token_hash  # only its hash
    bob.refresh_from_db()
    assert bob.email == ""  # not before the link is opened
    assert email_address_verify(user=bob, token=token) == "bob@example.org"
    bob.refresh_from_db()
    assert bob.email == "bob@example.org"
    with pytest.raises(ApplicationError) as used:
        email_address_verify(user=bob, token=token)
    assert "token" in used.value.fields


def test_a_link_is_its_users_only_and_the_newest_only_and_lasts_a_day(bob, charlie, smtp_server):
    email_address_request(user=bob, address="bob@example.org", link_for=LINK)
    first = _token(smtp_server.wait_for(1)[0])
    with pytest.raises(ApplicationError):  # charlie, signed in, opens bob's link
        email_address_verify(user=charlie, token=first)
    email_address_request(user=bob, address="bob@lab.example.org", link_for=LINK)
    second = _token(smtp_server.wait_for(2)[1])
    with pytest.raises(ApplicationError):  # replaced by the newer one
        email_address_verify(user=bob, token=first)
    late = timezone.now() + TOKEN_LIFETIME + dt.timedelta(minutes=1)
    with pytest.raises(ApplicationError) as expired:
        email_address_verify(user=bob, token=second, now=late)
    assert "expired" in expired.value.fields["token"][0]
    assert email_address_verify(user=bob, token=second) == "bob@lab.example.org"
    charlie.refresh_from_db()
    assert charlie.email == ""


def test_a_bad_address_or_a_refusing_mail_server_keeps_nothing(bob, settings):
    with pytest.raises(ApplicationError) as bad:
        email_address_request(user=bob, address="bob-at-example", link_for=LINK)
    assert "email" in bad.value.fields
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9  # nothing listens there
    with pytest.raises(ApplicationError) as down:
        email_address_request(user=bob, address="bob@example.org", link_for=LINK)
    assert "email" in down.value.fields
    assert not EmailVerification.objects.exists()


def test_without_an_address_email_is_off_and_the_log_stays_clean(
    bob, vision, smtp_server, django_capture_on_commit_callbacks
):
    job = JobFactory(team=vision, owner=bob, name="resnet", state=JobState.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        _fail(job)
    assert Notification.objects.filter(user=bob, kind="job.failed").count() == 1  # the bell
    assert not Delivery.objects.filter(user=bob).exists()  # no e-mail, and no failure

    email_address_request(user=bob, address="bob@example.org", link_for=LINK)
    email_address_verify(user=bob, token=_token(smtp_server.wait_for(1)[0]))
    bob.refresh_from_db()
    again = JobFactory(team=vision, owner=bob, name="resnet-2", state=JobState.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        _fail(again)
    [delivery] = Delivery.objects.filter(user=bob)
    assert delivery_send(delivery.pk) == "sent"
    assert smtp_server.wait_for(2)[1]["To"] == "bob@example.org"

    email_address_remove(user=bob)
    bob.refresh_from_db()
    third = JobFactory(team=vision, owner=bob, name="resnet-3", state=JobState.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        _fail(third)
    assert Delivery.objects.filter(user=bob).count() == 1
