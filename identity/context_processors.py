from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from portal.models import Membership, Role


def team_admin(request: HttpRequest) -> dict[str, Any]:
    """Whether the nav shows "My teams": team admins and platform admins."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}

    def check() -> bool:
        return user.is_staff or Membership.objects.filter(user=user, role=Role.ADMIN).exists()

    return {"manages_teams": check}
