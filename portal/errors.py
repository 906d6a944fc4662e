"""Errors that services raise and the API / pages turn into responses."""

from __future__ import annotations

from collections.abc import Mapping


class ApplicationError(Exception):
    """A request the user can fix; ``fields`` names the offending fields when there are any."""

    status = 400

    def __init__(self, message: str, *, fields: Mapping[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fields = dict(fields or {})


class NotFound(ApplicationError):
    """Missing, or belonging to a team the caller is not in: the two look the same on purpose."""

    status = 404


class Forbidden(ApplicationError):
    """The caller can see the object but their role does not allow the action."""

    status = 403


class Conflict(ApplicationError):
    """The object's current state does not allow the action (e.g. cancelling a finished job)."""

    status = 409
