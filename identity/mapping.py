"""Group → team/role rules applied to one user: the whole rule, in one place, for OpenID
Connect sign-ins, LDAP sign-ins and the LDAP sync alike.

Only memberships the provider made (``ProviderMembership``) are changed or removed; a
membership made by hand is kept as it is, even when a rule would give another role.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from identity.models import ExternalIdentity, GroupRule, MappedRole, MembershipAudit
from identity.models import ProviderMembership as Mark
from portal.models import Membership

_RANK = {MappedRole.VIEWER: 0, MappedRole.MEMBER: 1, MappedRole.ADMIN: 2}


@dataclass(frozen=True)
class Wanted:
    """What the rules give one user: team id → (role, the groups that gave it), and staff."""

    teams: dict[int, tuple[str, tuple[str, ...]]]
    platform_admin: bool


def rules_for(groups: Iterable[str], provider: str) -> Wanted:
    """Evaluate every rule against ``groups``; the highest role per team wins."""
    names = sorted(set(groups))
    teams: dict[int, tuple[str, tuple[str, ...]]] = {}
    staff = False
    for rule in GroupRule.objects.filter(provider__in=["", provider]).order_by("id"):
        matched = tuple(g for g in names if fnmatch.fnmatchcase(g, rule.pattern))
        if not matched:
            continue
        if rule.role == MappedRole.PLATFORM_ADMIN:
            staff = True
            continue
        assert rule.team_id is not None  # the check constraint
        old = teams.get(rule.team_id)
        if old is None or _RANK[MappedRole(rule.role)] > _RANK[MappedRole(old[0])]:
            teams[rule.team_id] = (rule.role, matched)
        elif old[0] == rule.role:
            teams[rule.team_id] = (old[0], tuple(sorted(set(old[1]) | set(matched))))
    return Wanted(teams=teams, platform_admin=staff)


def groups_of(claims: dict[str, Any], claim: str) -> list[str]:
    """The group names in an OpenID Connect ``claim`` (a list, or one string)."""
    value = claims.get(claim) or []
    if isinstance(value, str):
        value = [value]
    return [str(g) for g in value if isinstance(g, str | int)]


def _audit(user: AbstractBaseUser, provider: str, action: str, team_id: int | None, detail: str):
    MembershipAudit.objects.create(
        source=provider, user=user, team_id=team_id, action=action, detail=detail[:300]
    )


@transaction.atomic
def apply_groups(
    user: AbstractBaseUser, identity: ExternalIdentity, groups: Iterable[str], *, sync: bool = False
) -> list[str]:
    """Bring ``user``'s provider-made memberships and platform-admin grant in line with
    ``groups``; returns the changes made, in words (also written to the audit trail)."""
    provider = identity.provider
    groups = sorted(set(groups))
    wanted = rules_for(groups, provider)
    changes: list[str] = []
    current = {
        m.team_id: m
        for m in Membership.objects.select_for_update(of=("self",))
        .filter(user=user)
        .select_related("provider_mark", "team")
    }
    for team_id, (role, given_by) in wanted.teams.items():
        membership = current.get(team_id)
        if membership is None:
            membership = Membership.objects.create(user=user, team_id=team_id, role=role)
            Mark.objects.create(membership=membership, provider=provider, groups=list(given_by))
            changes.append(f"added to team {membership.team.slug} as {role}")
            _audit(user, provider, "member-added", team_id, f"{role} from {', '.join(given_by)}")
            continue
        mark = getattr(membership, "provider_mark", None)
        if mark is None or mark.provider != provider:
            continue  # made by hand (or by another provider): not ours to change
        if membership.role != role:
            _audit(user, provider, "role-changed", team_id, f"{membership.role} → {role}")
            changes.append(f"role in {membership.team.slug}: {membership.role} → {role}")
            membership.role = role
            membership.save(update_fields=["role"])
        if mark.groups != list(given_by):
            mark.groups = list(given_by)
            mark.save(update_fields=["groups"])
    for team_id, membership in current.items():
        mark = getattr(membership, "provider_mark", None)
        if team_id in wanted.teams or mark is None or mark.provider != provider:
            continue
        _audit(user, provider, "member-removed", team_id, f"no group gives it ({membership.role})")
        changes.append(f"removed from team {membership.team.slug}")
        membership.delete()
    changes += _apply_staff(user, identity, wanted.platform_admin)
    now = timezone.now()
    identity.groups = groups
    if sync:
        identity.last_sync_at = now
    else:
        identity.last_sign_in_at = now
    identity.save()
    return changes


def _apply_staff(user: AbstractBaseUser, identity: ExternalIdentity, wanted: bool) -> list[str]:
    """Grant platform admin from a group, and take back only a grant a group gave."""
    if wanted and not user.is_staff:  # type: ignore[attr-defined]
        user.is_staff = True  # type: ignore[attr-defined]
        user.save(update_fields=["is_staff"])
        identity.staff_from_groups = True
        _audit(user, identity.provider, "platform-admin-granted", None, "from a group")
        return ["platform admin granted"]
    if not wanted and identity.staff_from_groups:
        identity.staff_from_groups = False
        if user.is_staff:  # type: ignore[attr-defined]
            user.is_staff = False  # type: ignore[attr-defined]
            user.save(update_fields=["is_staff"])
            _audit(user, identity.provider, "platform-admin-removed", None, "no group gives it")
            return ["platform admin removed"]
    return []
