"""The event kinds, their default channels, and reading and changing a user's preferences.

Defaults (no preference row): the terminal states and preemption by email, everything in the
in-portal list, a queued job reported after 60 minutes. The in-portal list is not a choice:
it is the record every other channel delivers from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from notifications.models import Channel, Preference
from portal.access import AnyUser
from portal.errors import ApplicationError

# kind -> what it means, in the settings page's words
EVENTS: dict[str, str] = {
    "job.running": "A job of mine started (or runs again after a restart)",
    "job.restarting": "A job of mine is restarting: its pods were stopped and wait for nodes",
    "job.succeeded": "A job of mine succeeded",
    "job.failed": "A job of mine failed (with the reason)",
    "job.preempted": "A job of mine was preempted",
    "job.requeued": "A job of mine was requeued",
    "job.cancelled": "Someone else cancelled a job of mine (who, and why)",
    "job.waiting": "A job of mine has waited in the queue longer than my threshold",
    "job.near_max_runtime": "A job of mine is close to its max runtime",
    "team.quota_changed": "A quota of my team changed",
    "cluster.unreachable": "A cluster became unreachable (platform admins)",
    "cluster.draining": "A cluster was drained (platform admins)",
    "cluster.finding": "The cluster doctor found a new problem on a cluster (platform admins)",
}
DEFAULT_EMAIL = frozenset(
    {
        "job.succeeded",
        "job.failed",
        "job.preempted",
        "job.cancelled",
        "cluster.unreachable",
        "cluster.draining",
        "cluster.finding",
    }
)
PERSONAL_CHANNELS = (Channel.EMAIL.value,)
DEFAULT_WAIT_MINUTES = 60
MAX_WAIT_MINUTES = 60 * 24 * 30


@dataclass(frozen=True)
class Preferences:
    events: dict[str, list[str]]
    wait_threshold_minutes: int | None

    def channels_for(self, kind: str) -> list[str]:
        return self.events.get(kind, [])

    def as_dict(self) -> dict[str, Any]:
        return {"events": self.events, "wait_threshold_minutes": self.wait_threshold_minutes}


def preferences_default() -> Preferences:
    return Preferences(
        events={k: (["email"] if k in DEFAULT_EMAIL else []) for k in EVENTS},
        wait_threshold_minutes=DEFAULT_WAIT_MINUTES,
    )


def _from_row(row: Preference | None) -> Preferences:
    base = preferences_default()
    if row is None:
        return base
    events = dict(base.events)
    for kind, channels in (row.events or {}).items():
        if kind in EVENTS and isinstance(channels, list):
            events[kind] = [c for c in channels if c in PERSONAL_CHANNELS]
    return Preferences(events=events, wait_threshold_minutes=row.wait_threshold_minutes)


def preferences_of(user_id: int) -> Preferences:
    """A user's preferences: their row over the defaults."""
    return _from_row(Preference.objects.filter(user_id=user_id).first())


def preferences_of_many(user_ids: list[int]) -> dict[int, Preferences]:
    rows = {p.user_id: p for p in Preference.objects.filter(user_id__in=user_ids)}
    return {uid: _from_row(rows.get(uid)) for uid in user_ids}


def preferences_set(*, user: AnyUser, data: dict[str, Any]) -> Preferences:
    """Change the caller's preferences with the fields given (``events``: kind → channels, any
    kind left out keeps its value; ``wait_threshold_minutes``: minutes or null). Bad input is
    an ApplicationError naming the field, and nothing is stored."""
    if not isinstance(data, dict):
        raise ApplicationError("Expected an object.", fields={"events": ["An object."]})
    unknown = set(data) - {"events", "wait_threshold_minutes"}
    if unknown:
        name = sorted(unknown)[0]
        raise ApplicationError(f"Unknown field {name}.", fields={name: ["Unknown field."]})
    current = preferences_of(user.pk)
    events = dict(current.events)
    if "events" in data:
        given = data["events"]
        if not isinstance(given, dict):
            raise ApplicationError(
                "Invalid events.", fields={"events": ["An object of event kind → channels."]}
            )
        for kind, channels in given.items():
            if kind not in EVENTS:
                raise ApplicationError(
                    f"Unknown event {kind!r}.",
                    fields={"events": [f"Unknown event {kind!r}; one of {', '.join(EVENTS)}."]},
                )
            if not isinstance(channels, list) or not all(
                isinstance(c, str) and c in PERSONAL_CHANNELS for c in channels
            ):
                raise ApplicationError(
                    f"Invalid channels for {kind}.",
                    fields={"events": [f"{kind}: a list of {', '.join(PERSONAL_CHANNELS)}."]},
                )
            events[kind] = sorted(set(channels))
    wait = current.wait_threshold_minutes
    if "wait_threshold_minutes" in data:
        wait = data["wait_threshold_minutes"]
        if wait is not None and (type(wait) is not int or not 1 <= wait <= MAX_WAIT_MINUTES):
            raise ApplicationError(
                "Invalid wait threshold.",
                fields={
                    "wait_threshold_minutes": [
                        f"Minutes from 1 to {MAX_WAIT_MINUTES}, or null for never."
                    ]
                },
            )
    Preference.objects.update_or_create(
        user_id=user.pk, defaults={"events": events, "wait_threshold_minutes": wait}
    )
    return Preferences(events=events, wait_threshold_minutes=wait)
