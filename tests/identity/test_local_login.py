"""Local passwords: on for everyone by default (the demo), and when switched off only for the
named break-glass admins, on /login/ and /admin/login/ alike; the provider settings are read
from the environment and a missing one names its variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.django_db


def test_local_login_off_but_for_named_admins(client, settings, alice, root):
    settings.GPUPOOL_LOCAL_LOGIN = False
    settings.GPUPOOL_LOCAL_LOGIN_ADMINS = ["root"]
    refused = client.post("/login/", {"username": "alice", "password": "pw-for-tests"})
    assert refused.status_code == 200 and "_auth_user_id" not in client.session
    assert b"Break-glass" not in refused.content  # no providers: the plain form
    allowed = client.post("/login/", {"username": "root", "password": "pw-for-tests"})
    assert allowed.status_code == 302 and client.session["_auth_user_id"] == str(root.pk)
    client.logout()
    assert (
        client.post("/admin/login/", {"username": "alice", "password": "pw-for-tests"}).status_code
        == 200
    )
    assert "_auth_user_id" not in client.session


def _settings_with(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "import config.settings as s; print(s.GPUPOOL_OIDC_PROVIDERS, s.CONTENT_SECURITY_POLICY)"
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_providers_come_from_the_environment(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    done = _settings_with(
        {
            "GPUPOOL_OIDC_PROVIDERS": "corp",
            "GPUPOOL_OIDC_CORP_ISSUER": "https://id.example.org/realms/x",
            "GPUPOOL_OIDC_CORP_CLIENT_ID": "portal",
            "GPUPOOL_OIDC_CORP_CLIENT_SECRET_FILE": str(secret),
        }
    )
    assert done.returncode == 0, done.stderr
    assert "'client_secret': 'from-a-file'" in done.stdout
    assert "'https://id.example.org'" in done.stdout  # the CSP's form-action
    assert "'offline_access': True" in done.stdout  # the sync's refresh token, by default


def test_the_oidc_sync_is_scheduled_and_offline_access_can_be_switched_off(tmp_path):
    code = (
        "import config.settings as s; print(s.GPUPOOL_OIDC_PROVIDERS[0]['offline_access'], "
        "s.CELERY_BEAT_SCHEDULE['identity-oidc-sync'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={
            **os.environ,
            "GPUPOOL_OIDC_PROVIDERS": "corp",
            "GPUPOOL_OIDC_CORP_ISSUER": "https://id.example.org",
            "GPUPOOL_OIDC_CORP_CLIENT_ID": "portal",
            "GPUPOOL_OIDC_CORP_CLIENT_SECRET": "s",
            "GPUPOOL_OIDC_CORP_OFFLINE_ACCESS": "false",
            "GPUPOOL_OIDC_SYNC_INTERVAL": "600",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("False {'task': 'identity.oidc_sync', 'schedule': 600.0}")


def test_a_provider_without_its_client_id_names_the_variable():
    done = _settings_with(
        {"GPUPOOL_OIDC_PROVIDERS": "corp", "GPUPOOL_OIDC_CORP_ISSUER": "https://id.example.org"}
    )
    assert done.returncode != 0 and "GPUPOOL_OIDC_CORP_CLIENT_ID must be set" in done.stderr
