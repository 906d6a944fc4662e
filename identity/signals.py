"""Sign-in listeners of the identity app."""

from __future__ import annotations

import logging
from typing import Any

from identity.invitations import invitations_accept_for

log = logging.getLogger(__name__)


def join_invited_teams(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """Pending invitations to the account's e-mail address are accepted at sign-in. A failure
    here never blocks the sign-in: the link still works."""
    try:
        invitations_accept_for(user)
    except Exception:
        log.exception("accepting invitations at sign-in failed for user %s", user.pk)
