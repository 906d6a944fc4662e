"""The readers every settings part uses, and where the checkout and its state live.

A malformed value is a start-up error naming its variable, never a silent default: each reader
here raises ``ImproperlyConfigured`` with the variable's name.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

# The checkout's root: config/settings/ is two folders below it.
BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(os.environ.get("GPUPOOL_VAR_DIR", BASE_DIR / "var"))

env = environ.Env()


def env_secret(name: str, default: str | None = None) -> str | None:
    """Read a secret from ``NAME`` or from the file named by ``NAME_FILE`` (Docker secrets)."""
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        try:
            return Path(file_path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_path!r} cannot be read: {exc}") from exc
    return os.environ.get(name, default)


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    """An integer setting; a malformed or out-of-range value names the variable."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_bool(name: str, default: bool) -> bool:
    """A boolean setting; anything but the usual spellings is an error naming the variable."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {raw!r}")


def _networks_setting(name: str, default: list[str]) -> list[str]:
    """A comma-separated list of addresses or CIDRs; a malformed one names the variable."""
    values = [v.strip() for v in env.list(name, default=default) if v.strip()]
    for value in values:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {value!r} is not a network ({exc})") from exc
    return values


def _env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    """A decimal setting; a malformed or negative value names the variable."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc
    if not value >= minimum:  # also refuses nan
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {raw!r}")
    return value
