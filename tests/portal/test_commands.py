"""Management commands for scripts."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_create_api_token_prints_a_working_token(bob, capsys):
    call_command("create_api_token", "bob", "--name", "ci")
    raw = capsys.readouterr().out.strip()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = client.get("/api/v1/teams/")
    assert response.status_code == 200
    assert [t["slug"] for t in response.json()] == ["vision"]


def test_create_api_token_for_an_unknown_user_fails():
    with pytest.raises(CommandError, match="nobody"):
        call_command("create_api_token", "nobody")
