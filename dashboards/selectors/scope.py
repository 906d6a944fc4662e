"""Who sees which team: the scope every dashboard selector is read through."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from dashboards.live_types import TeamInfo
from portal.access import team_roles_of

AnyUser = AbstractBaseUser | AnonymousUser
OTHER_TEAMS = "Other teams"


@dataclass(frozen=True)
class TeamScope:
    """The caller's teams and whether other teams appear by name."""

    own: frozenset[int]
    show_others: bool
    staff: bool = False

    def visible(self, team_id: int) -> bool:
        return self.show_others or self.staff or team_id in self.own

    def label(self, team: TeamInfo) -> str:
        return team.name if self.visible(team.id) else OTHER_TEAMS


def team_scope(*, user: AnyUser) -> TeamScope:
    """``own``: the teams the caller is a member of (for a platform admin too, who sees every
    team anyway but should not find 200 idle teams marked "yours")."""
    own = frozenset(team_roles_of(user))
    return TeamScope(
        own=own,
        show_others=settings.GPUPOOL_DASHBOARD_SHOW_OTHER_TEAMS,
        staff=bool(getattr(user, "is_staff", False)),
    )
