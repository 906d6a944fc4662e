"""``make demo-sso``: seed_demo_sso writes the test provider's config and the demo group
rules; the provider started on that config signs a demo SSO user in with the right team."""

from __future__ import annotations

import json
import shutil

import pytest
from django.core.management import call_command

from portal.demo import demo_seed
from portal.models import Membership, Role
from tests.identity.flows import sign_in
from tests.identity.servers import IDP_DIR, free_port, missing, process

pytestmark = pytest.mark.django_db


def test_the_demo_provider_signs_erin_in_as_vision_admin(client, settings, tmp_path):
    if shutil.which("node") is None or not (IDP_DIR / "node_modules").is_dir():
        missing("node / oidc-provider", f"npm ci --prefix {IDP_DIR}")
    settings.VAR_DIR = tmp_path
    demo_seed()
    port = free_port()
    call_command("seed_demo_sso", idp_port=port, portal="http://testserver")
    call_command("seed_demo_sso", idp_port=port, portal="http://testserver")  # idempotent
    config_path = tmp_path / "demo" / "idp.json"
    config = json.loads(config_path.read_text())
    client_conf = config["clients"][0]
    settings.GPUPOOL_OIDC_PROVIDERS = [
        {
            "name": "demo",
            "label": "Demo SSO",
            "issuer": config["issuer"],
            "client_id": client_conf["client_id"],
            "client_secret": client_conf["client_secret"],
            "scopes": "openid email profile groups",
            "groups_claim": "groups",
            "username_claim": "preferred_username",
        }
    ]
    server = [shutil.which("node") or "node", str(IDP_DIR / "server.mjs"), str(config_path)]
    with process(server, port, tmp_path / "idp.log", cwd=IDP_DIR):
        response = sign_in(client, "erin", password="gpupool-sso-demo", provider="demo")
    assert response.status_code == 302
    assert Membership.objects.get(user__username="erin", team__slug="vision").role == Role.ADMIN
