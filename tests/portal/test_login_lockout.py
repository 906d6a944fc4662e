"""Login brute force is bounded: failures are counted per account and per address, on the
portal's login and the admin's alike; past the limit a clear 429 page, until the cool-off
passes or a platform admin unlocks the account. Forwarded-for headers from anyone but a
configured proxy change nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from axes.models import AccessAttempt
from django.utils import timezone

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

LOGIN, ADMIN_LOGIN = "/login/", "/admin/login/"


@pytest.fixture(autouse=True)
def _limit(settings):
    settings.AXES_FAILURE_LIMIT = 3


def _try(client, username, password="wrong-password", *, path=LOGIN, address="10.0.0.1", **meta):
    return client.post(
        path, {"username": username, "password": password}, REMOTE_ADDR=address, **meta
    )


def _locked(response) -> bool:
    return response.status_code == 429 and "Too many failed logins" in response.content.decode()


def test_an_account_is_locked_after_the_limit_even_with_the_right_password(client, bob):
    for _ in range(2):
        assert _try(client, "bob").status_code == 200  # the form again, with its error
    third = _try(client, "bob")
    assert _locked(third)
    assert third["Retry-After"] == str(15 * 60)
    page = third.content.decode()
    assert "after 3 failed attempts" in page and "ask a platform admin to unlock" in page
    assert _locked(_try(client, "bob", "pw-for-tests", address="10.9.9.9"))  # any address
    assert "_auth_user_id" not in client.session


def test_an_address_is_locked_after_failures_across_accounts(client, bob, alice):
    for name in ("ann", "ben", "cat"):  # a spray: one guess per account
        _try(client, name)
    assert _locked(_try(client, "bob", "pw-for-tests"))
    other_address = _try(client, "alice", "pw-for-tests", address="10.0.0.2")
    assert other_address.status_code == 302


def test_the_admin_login_counts_and_is_locked_too(client, root):
    for _ in range(3):
        _try(client, "root", path=ADMIN_LOGIN)
    assert _locked(_try(client, "root", "pw-for-tests", path=ADMIN_LOGIN, address="10.0.0.7"))
    assert _locked(_try(client, "root", "pw-for-tests", path=LOGIN, address="10.0.0.8"))


def test_a_forwarded_for_header_from_a_client_does_not_spread_the_count(client, bob):
    for i in range(3):
        _try(client, f"user{i}", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}")
    assert _locked(_try(client, "bob", "pw-for-tests", HTTP_X_FORWARDED_FOR="192.0.2.99"))


def test_behind_a_trusted_proxy_each_client_is_counted_on_its_own(client, settings, bob):
    settings.GPUPOOL_TRUSTED_PROXIES = ["127.0.0.1"]
    via_proxy = {"address": "127.0.0.1"}
    for name in ("ann", "ben", "cat"):
        _try(client, name, HTTP_X_FORWARDED_FOR="198.51.100.1", **via_proxy)
    assert _locked(
        _try(client, "bob", "pw-for-tests", HTTP_X_FORWARDED_FOR="198.51.100.1", **via_proxy)
    )
    fine = _try(client, "bob", "pw-for-tests", HTTP_X_FORWARDED_FOR="198.51.100.2", **via_proxy)
    assert fine.status_code == 302
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"198.51.100.1"}


def test_the_lock_lifts_after_the_cool_off(client, bob):
    for _ in range(3):
        _try(client, "bob")
    assert _locked(_try(client, "bob", "pw-for-tests"))
    AccessAttempt.objects.update(attempt_time=timezone.now() - dt.timedelta(minutes=16))
    assert _try(client, "bob", "pw-for-tests").status_code == 302


def test_a_platform_admin_unlocks_an_account_in_the_admin(client, bob, root):
    for _ in range(3):
        _try(client, "bob", address="10.0.0.3")
    assert _locked(_try(client, "bob", "pw-for-tests", address="10.0.0.4"))

    admin = type(client)()
    admin.force_login(root)
    response = admin.post(
        "/admin/auth/user/",
        {"action": "unlock_login", "_selected_action": [bob.pk]},
        follow=True,
    )
    assert "Unlocked bob" in response.content.decode()
    assert _try(client, "bob", "pw-for-tests", address="10.0.0.4").status_code == 302


def test_a_failure_below_the_limit_does_not_stop_a_login(client):
    UserFactory(username="dana")
    _try(client, "dana")
    assert _try(client, "dana", "pw-for-tests").status_code == 302
