"""The audit of a team's own templates and notification hooks (``TeamChange``): one row per
create, edit or delete, written by whoever makes the change (portal.jobs.job_templates here,
notifications.webhooks from the wing above). Kept in the core so no layer imports upward."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from portal.access import AnyUser
from portal.models import Team, TeamChange

_MAX_VALUE = 60


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 1] + "…"


def changed_fields(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """``a: old → new; b: added x`` for every key whose value differs (values shortened), so an
    admin reads what changed without the whole object. Never give it a secret."""
    parts = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if key not in before:
            parts.append(f"{key}: set to {_short(new)}")
        elif key not in after:
            parts.append(f"{key}: removed (was {_short(old)})")
        else:
            parts.append(f"{key}: {_short(old)} → {_short(new)}")
    return "; ".join(parts)


def team_change_record(
    *, team: Team, actor: AnyUser | None, kind: str, action: str, subject: str, detail: str = ""
) -> TeamChange:
    """Write one audit row (call it inside the change's transaction, so both or neither)."""
    return TeamChange.objects.create(
        team=team,
        actor=actor if actor is not None and actor.is_authenticated else None,
        kind=kind,
        action=action,
        subject=subject[:100],
        detail=detail[:500],
    )
