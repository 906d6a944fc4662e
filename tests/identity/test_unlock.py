"""An account's owner unlocks its login through a link mailed to the account's address (a real
SMTP server, aiosmtpd): anyone who knows a name can lock it, but only until its owner reads
their mail. The page never says whether an account exists, and sends at most one mail per
interval."""

from __future__ import annotations

import re

import pytest
from django.core.cache import cache

from identity.unlock import MAIL_SENT_KEY
from tests.notifications.conftest import smtp_server  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _limit(settings):
    settings.AXES_FAILURE_LIMIT = 3


@pytest.fixture(autouse=True)
def _no_mail_sent_by_earlier_tests():
    """The one-mail-per-interval mark lives in the shared cache, not the rolled-back database,
    and account ids repeat from one test to the next."""
    if hasattr(cache, "delete_pattern"):  # django-redis
        cache.delete_pattern(f"{MAIL_SENT_KEY}:*")
    else:
        cache.clear()


def _log_in(client, username, password, address):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def _lock(client, name: str) -> None:
    """Three wrong passwords from three addresses: the account is locked everywhere."""
    for i in range(3):
        _log_in(client, name, "guess", f"203.0.113.{i}")
    assert _log_in(client, name, "pw-for-tests", "198.51.100.7").status_code == 429


def _said(response) -> str:
    """The page's words, without what differs per response (CSRF tokens, nonces)."""
    return re.search(r"<h1>.*?</div>", response.content.decode(), re.S).group(0)


def _link_in(message) -> str:
    body = message.get_payload(decode=True).decode()
    return re.search(r"http://testserver(/login/unlock/\S+/)", body).group(1)


def test_the_owner_unlocks_with_the_mailed_link(client, bob, smtp_server):  # noqa: F811
    bob.email = "bob@portal.example"
    bob.save()
    _lock(client, "bob")
    locked_page = _log_in(client, "bob", "pw-for-tests", "198.51.100.7").content.decode()
    assert 'href="/login/unlock/"' in locked_page

    sent = client.post("/login/unlock/", {"who": "BOB"})
    assert sent.status_code == 200 and "Check your e-mail" in sent.content.decode()
    [mail] = smtp_server.wait_for(1)
    assert mail["To"] == "bob@portal.example" and "Unlock" in mail["Subject"]
    link = _link_in(mail)

    page = client.get(link)
    assert page.status_code == 200 and "Unlock my login" in page.content.decode()
    assert _log_in(client, "bob", "pw-for-tests", "198.51.100.8").status_code == 429  # GET: no
    done = client.post(link)
    assert done.status_code == 200 and "unlocked" in done.content.decode()

    assert _log_in(client, "bob", "pw-for-tests", "198.51.100.9").status_code == 302
    client.logout()
    assert client.post(link).status_code == 400  # spent: the sign-in moved last_login


def test_the_page_says_the_same_for_nobody_and_sends_one_mail_per_interval(
    client,
    bob,
    smtp_server,  # noqa: F811
):
    bob.email = "bob@portal.example"
    bob.save()
    nobody = client.post("/login/unlock/", {"who": "nobody-here"})
    first = client.post("/login/unlock/", {"who": "bob@portal.example"})
    again = client.post("/login/unlock/", {"who": "bob"})
    assert nobody.status_code == first.status_code == again.status_code == 200
    assert _said(nobody) == _said(first) == _said(again)  # no word on whether bob exists
    smtp_server.wait_for(2, timeout=1.5)
    assert len(smtp_server.messages) == 1


def test_a_forged_or_tampered_link_unlocks_nothing(client, bob, smtp_server):  # noqa: F811
    bob.email = "bob@portal.example"
    bob.save()
    _lock(client, "bob")
    client.post("/login/unlock/", {"who": "bob"})
    link = _link_in(smtp_server.wait_for(1)[0])
    tampered = link[:-3] + ("x" if link[-3] != "x" else "y") + link[-2:]
    assert client.post(tampered).status_code == 400
    assert client.post("/login/unlock/!!/abc-def/").status_code == 400
    assert _log_in(client, "bob", "pw-for-tests", "198.51.100.20").status_code == 429


def test_a_name_with_control_characters_is_refused_naming_the_field(client):
    response = client.post("/login/unlock/", {"who": "bob\r\nBcc: x@example.org"})
    assert response.status_code == 400
    assert "Enter a username or an e-mail address." in response.content.decode()
