"""Demo data: three teams, users with known passwords, the GPU catalog. Idempotent."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from portal.catalog import catalog_seed
from portal.models import Membership, Role, Team

DEMO_PASSWORD = "gpupool-demo"

DEMO_TEAMS = (
    ("Vision", "vision", "Image models"),
    ("Language", "language", "LLM fine-tuning and serving"),
    ("Robotics", "robotics", "Policy learning"),
)
# username, staff, [(team slug, role)]
DEMO_USERS = (
    ("admin", True, []),
    ("alice", False, [("vision", Role.ADMIN)]),
    ("bob", False, [("vision", Role.MEMBER), ("language", Role.MEMBER)]),
    ("charlie", False, [("language", Role.ADMIN)]),
    ("dana", False, [("robotics", Role.MEMBER)]),
    ("viewer", False, [("vision", Role.VIEWER)]),
)


def demo_user_roles() -> list[tuple[str, str]]:
    """(username, role in words) of each demo user, as ``seed_demo``, ``run_demo`` and the
    login page in demo mode name them."""
    names = {slug: name for name, slug, _ in DEMO_TEAMS}
    return [
        (
            username,
            "platform admin"
            if staff
            else ", ".join(f"{Role(role).label.lower()} of {names[t]}" for t, role in memberships),
        )
        for username, staff, memberships in DEMO_USERS
    ]


@transaction.atomic
def demo_seed() -> list[tuple[str, str]]:
    """Create (or refresh) the demo users and teams; returns (username, password) pairs."""
    catalog_seed(path=settings.GPUPOOL_GPU_CATALOG_CSV)
    teams = {}
    for name, slug, description in DEMO_TEAMS:
        teams[slug], _ = Team.objects.get_or_create(
            slug=slug, defaults={"name": name, "description": description}
        )
    user_model = get_user_model()
    credentials = []
    for username, staff, memberships in DEMO_USERS:
        user, _ = user_model.objects.get_or_create(username=username)
        user.is_staff = user.is_superuser = staff
        user.set_password(DEMO_PASSWORD)
        user.save()
        for slug, role in memberships:
            Membership.objects.update_or_create(
                user=user, team=teams[slug], defaults={"role": role}
            )
        credentials.append((username, DEMO_PASSWORD))
    return credentials
