"""Prepare the demo's optional single sign-on: group rules for the demo teams, and the test
OpenID provider's configuration and users (``make demo-sso`` runs this, then the demo with
the provider as one more process). Idempotent; only for the demo, never production."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from identity.models import GroupRule
from portal.models import Team

DEMO_IDP_PASSWORD = "gpupool-sso-demo"
# username at the provider → its groups (first sign-in makes the portal account)
DEMO_SSO_USERS = {
    "erin": ["gpu-vision-admins"],
    "frank": ["gpu-vision-users", "gpu-language-users"],
    "grace": ["gpu-platform-admins"],
}
DEMO_RULES = (
    ("gpu-vision-*", "vision", "member"),
    ("gpu-vision-admins", "vision", "admin"),
    ("gpu-language-*", "language", "member"),
    ("gpu-platform-admins", None, "platform_admin"),
)


class Command(BaseCommand):
    help = "Write the demo OpenID provider's config and users, and the demo group rules."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--idp-port", type=int, default=8010)
        parser.add_argument("--portal", default="http://127.0.0.1:8000")

    def handle(self, *args: Any, **options: Any) -> None:
        for pattern, slug, role in DEMO_RULES:
            team = Team.objects.get(slug=slug) if slug else None
            GroupRule.objects.get_or_create(pattern=pattern, team=team, role=role)
        folder = Path(settings.VAR_DIR) / "demo"
        folder.mkdir(parents=True, exist_ok=True)
        issuer = f"http://127.0.0.1:{options['idp_port']}"
        users = {
            name: {
                "password": DEMO_IDP_PASSWORD,
                "email": f"{name}@demo.invalid",
                "name": name.title(),
                "groups": groups,
            }
            for name, groups in DEMO_SSO_USERS.items()
        }
        (folder / "idp-users.json").write_text(json.dumps(users, indent=1))
        portal = options["portal"].rstrip("/")
        config = {
            "issuer": issuer,
            "port": options["idp_port"],
            "users_file": str(folder / "idp-users.json"),
            "clients": [
                {
                    "client_id": "gpupool-demo",
                    "client_secret": "gpupool-demo-client-secret",
                    "redirect_uris": [f"{portal}/sso/demo/callback/"],
                    "post_logout_redirect_uris": [f"{portal}/login/"],
                }
            ],
        }
        (folder / "idp.json").write_text(json.dumps(config, indent=1))
        self.stdout.write("Demo SSO users at the test provider (username / password):")
        for name, groups in DEMO_SSO_USERS.items():
            self.stdout.write(f"  {name:<8} / {DEMO_IDP_PASSWORD}   (groups: {', '.join(groups)})")
