"""A team admin cannot point a webhook into the portal's own network: private, loopback,
link-local, metadata and unusable addresses, in every spelling, are a 400 naming the URL field
with nothing stored, unless the operator opened that network (``GPUPOOL_WEBHOOK_ALLOW_NETWORKS``);
metadata addresses never open. The check runs again before every send, after DNS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from notifications.models import Delivery, TeamWebhook
from notifications.outbox import delivery_send
from notifications.webhooks import webhook_create
from portal.jobs.state import job_transition
from portal.models import JobState
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
PRIVATE = "is a private address (webhooks may reach only the private networks the operator "
LOCAL = "is a loopback or link-local address"


def _create(api: Any, url: str) -> Any:
    return api.post(
        "/api/v1/teams/vision/webhooks/",
        {"name": "probe", "url": url, "events": ["job.failed"]},
        format="json",
    )


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://10.0.0.1:10250/", f"10.0.0.1 {PRIVATE}"),  # a kubelet
        ("https://10.0.0.1:6379/", f"10.0.0.1 {PRIVATE}"),  # Redis
        ("https://10.0.0.1:5432/", f"10.0.0.1 {PRIVATE}"),  # PostgreSQL
        ("https://10.0.0.1:2379/", f"10.0.0.1 {PRIVATE}"),  # etcd
        ("https://172.16.0.1/hook", f"172.16.0.1 {PRIVATE}"),
        ("https://172.31.255.254/hook", f"172.31.255.254 {PRIVATE}"),
        ("https://192.168.1.10/hook", f"192.168.1.10 {PRIVATE}"),
        ("https://100.64.0.1/hook", f"100.64.0.1 {PRIVATE}"),  # shared address space (CGNAT)
        ("https://[fd00::1]/hook", PRIVATE),  # unique local
        ("https://[::ffff:10.0.0.1]/hook", PRIVATE),  # IPv4-mapped
        ("https://[64:ff9b::a00:1]/hook", PRIVATE),  # NAT64 of 10.0.0.1
        ("https://127.0.0.1:6379/", f"127.0.0.1 {LOCAL}"),
        ("https://[::1]:5432/", LOCAL),
        ("https://[::ffff:127.0.0.1]/", LOCAL),
        ("https://[fe80::1]/hook", LOCAL),
        ("https://169.254.10.1/hook", LOCAL),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a cloud metadata address"),
        ("https://[::ffff:169.254.169.254]/", "is a cloud metadata address"),
        ("https://[fd00:ec2::254]/", "is a cloud metadata address"),
        ("https://metadata.google.internal/", "is a cloud metadata host"),
        ("https://0.0.0.0:6379/", "0.0.0.0 is not a usable unicast address"),
        ("https://[::]/", "is not a usable unicast address"),
        ("https://224.0.0.1/", "224.0.0.1 is not a usable unicast address"),
        ("https://0x7f.0.0.1/", "is not a canonical IPv4 address"),
        ("https://2130706433/", "is not a canonical IPv4 address"),
    ],
)
def test_an_internal_address_is_refused_naming_the_url(api_as, alice, settings, url, words):
    settings.GPUPOOL_WEBHOOK_ALLOW_LOCAL = False  # production: no local receivers
    answer = _create(api_as(alice), url)
    assert answer.status_code == 400, answer.json()
    [message] = answer.json()["extra"]["fields"]["url"]
    assert words in message
    assert not TeamWebhook.objects.exists()


def test_a_host_name_is_judged_by_what_it_resolves_to_without_saying_it(api_as, alice, settings):
    """``localhost`` is loopback after DNS; the refusal does not tell the team admin the
    address, so it cannot map internal names either."""
    settings.GPUPOOL_WEBHOOK_ALLOW_LOCAL = False
    answer = _create(api_as(alice), "https://localhost:5432/")
    assert answer.status_code == 400
    [message] = answer.json()["extra"]["fields"]["url"]
    assert message.startswith("localhost resolves to an address that is a loopback")
    assert "127.0.0.1" not in message and "::1" not in message


def test_the_page_refuses_a_private_address_with_the_reason(alice, settings):
    client = Client()
    client.force_login(alice)
    page = client.post(
        "/teams/vision/webhooks/", {"name": "kubelet", "url": "https://10.0.0.1:10250/"}
    )
    assert page.status_code == 400
    assert b"10.0.0.1 is a private address" in page.content
    assert b"GPUPOOL_WEBHOOK_ALLOW_NETWORKS" in page.content
    assert not TeamWebhook.objects.exists()


def test_an_operator_opens_a_private_network_and_only_that(api_as, alice, settings):
    settings.GPUPOOL_WEBHOOK_ALLOW_NETWORKS = ["10.20.0.0/16", "fd12:3456::/48"]
    api = api_as(alice)
    made = _create(api, "https://10.20.0.5:8443/hook")
    assert made.status_code == 201, made.json()
    assert made.json()["webhook"]["url"] == "https://10.20.0.5:8443/hook"
    TeamWebhook.objects.all().delete()
    assert _create(api, "https://[fd12:3456::7]/hook").status_code == 201
    TeamWebhook.objects.all().delete()
    assert _create(api, "https://[::ffff:10.20.0.9]/hook").status_code == 201  # same address
    TeamWebhook.objects.all().delete()

    next_door = _create(api, "https://10.21.0.5/hook")
    assert next_door.status_code == 400
    assert PRIVATE in next_door.json()["extra"]["fields"]["url"][0]
    assert _create(api, "https://192.168.1.10/hook").status_code == 400
    assert not TeamWebhook.objects.exists()


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://169.254.169.254/", "is a cloud metadata address"),
        ("https://100.100.100.200/", "is a cloud metadata address"),  # inside 100.64/10
        ("https://[fd00:ec2::254]/", "is a cloud metadata address"),  # inside fc00::/7
        ("https://127.0.0.1:6379/", LOCAL),  # loopback: GPUPOOL_WEBHOOK_ALLOW_LOCAL only
        ("https://0.0.0.0/", "is not a usable unicast address"),
    ],
)
def test_an_allow_list_never_opens_metadata_loopback_or_unusable_addresses(
    api_as, alice, settings, url, words
):
    settings.GPUPOOL_WEBHOOK_ALLOW_LOCAL = False
    settings.GPUPOOL_WEBHOOK_ALLOW_NETWORKS = ["0.0.0.0/0", "::/0"]  # everything, carelessly
    answer = _create(api_as(alice), url)
    assert answer.status_code == 400
    assert words in answer.json()["extra"]["fields"]["url"][0]
    assert not TeamWebhook.objects.exists()


def test_a_network_closed_after_saving_is_refused_at_the_send(
    alice, bob, vision, settings, django_capture_on_commit_callbacks
):
    settings.GPUPOOL_WEBHOOK_ALLOW_NETWORKS = ["10.20.0.0/16"]
    webhook_create(
        team=vision, by=alice, name="chat", url="https://10.20.0.5/hook", events=["job.failed"]
    )
    settings.GPUPOOL_WEBHOOK_ALLOW_NETWORKS = []  # the operator closed it again
    job = JobFactory(team=vision, owner=bob, state=JobState.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        job_transition(job_id=job.pk, expected=JobState.RUNNING, to=JobState.FAILED, reason="E")
    [delivery] = Delivery.objects.filter(channel="webhook")
    assert delivery_send(delivery.pk) == "failed"  # never sent: nothing to try again
    delivery.refresh_from_db()
    assert (delivery.error, delivery.last_error, delivery.attempts) == (
        "blocked",
        "blocked address",
        1,
    )


def _import_settings(**variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_WEBHOOK_")}
    return subprocess.run(
        [sys.executable, "-c", "import config.settings"],
        cwd=ROOT,
        env={**env, **variables},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_malformed_allow_list_stops_the_start_naming_the_variable():
    result = _import_settings(GPUPOOL_WEBHOOK_ALLOW_NETWORKS="10.20.0.0/16, 10.0.0.300/8")
    assert result.returncode != 0
    assert "ImproperlyConfigured: GPUPOOL_WEBHOOK_ALLOW_NETWORKS: '10.0.0.300/8'" in result.stderr
    assert _import_settings(GPUPOOL_WEBHOOK_ALLOW_NETWORKS="10.20.0.0/16,fd12::/48").returncode == 0


def test_the_old_all_private_switch_stops_the_start_pointing_at_the_allow_list():
    result = _import_settings(GPUPOOL_WEBHOOK_ALLOW_PRIVATE="true")
    assert result.returncode != 0
    assert "GPUPOOL_WEBHOOK_ALLOW_PRIVATE is no longer supported" in result.stderr
    assert "GPUPOOL_WEBHOOK_ALLOW_NETWORKS" in result.stderr
    assert _import_settings(GPUPOOL_WEBHOOK_ALLOW_PRIVATE="false").returncode == 0
