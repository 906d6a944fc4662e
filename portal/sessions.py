"""The session store: Django's database sessions, reading only keys Django could have made.

A cookie is anyone's to write. Django checks a session key's length only, so
``sessionid="abcdefgh\\000ijklmnop"`` reached PostgreSQL, which refuses a NUL in text, and every
page answered 500 to it. A key outside the alphabet and length Django gives session keys is
no session: the request goes on anonymous, as with an unknown key.
"""

from __future__ import annotations

import re

from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore

_KEY = re.compile(r"[a-z0-9]{32}")  # get_random_string(32, VALID_KEY_CHARS)


class SessionStore(DatabaseSessionStore):
    def _validate_session_key(self, key: str | None) -> bool:
        return bool(key) and _KEY.fullmatch(key) is not None
