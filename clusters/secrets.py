"""Cluster credentials at rest: sealed with MultiFernet under ``GPUPOOL_SECRET_KEYS``.

A cluster's bearer token (or client certificate and key) is the portal's most valuable secret:
whoever holds it can run pods on the cluster. So it is stored only as a Fernet token made with
keys that live outside the database (``GPUPOOL_SECRET_KEYS``, first key = current), and opened
only in memory, right before a client is built. The keys are dedicated (not ``SECRET_KEY``),
so rotating Django's session secret never touches them, and a database dump alone is useless.

A wrong or missing key fails closed: :class:`CredentialsUnreadable` says which cluster and
what to do, and nothing is attempted with a half-read secret. ``manage.py rotate_cluster_keys``
re-seals every row under the current key once a new key has been put first.

Nothing here logs, and no exception message ever contains a secret.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

__all__ = [
    "CredentialsUnreadable",
    "SecretMaterial",
    "credentials_open",
    "credentials_reseal",
    "credentials_seal",
    "secret_hint",
    "text_open",
    "text_seal",
]

_VERSION = 1


class CredentialsUnreadable(Exception):
    """Stored credentials cannot be opened with the configured keys (fail closed)."""


@dataclass(frozen=True)
class SecretMaterial:
    """The secret part of a cluster's credentials, in memory only; ``repr`` shows none of it."""

    token: str | None = field(default=None, repr=False)
    client_cert_pem: str | None = field(default=None, repr=False)
    client_key_pem: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        has_cert = self.client_cert_pem is not None or self.client_key_pem is not None
        if (self.token is not None) == has_cert:
            raise ValueError("credentials need either a token or a client certificate")
        if has_cert and (self.client_cert_pem is None or self.client_key_pem is None):
            raise ValueError("a client certificate needs its key")


@lru_cache(maxsize=4)
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    if not keys:
        raise CredentialsUnreadable("GPUPOOL_SECRET_KEYS is empty: no key to seal credentials")
    return MultiFernet([Fernet(k.encode()) for k in keys])


def _current() -> MultiFernet:
    return _fernet(tuple(settings.GPUPOOL_SECRET_KEYS))


def credentials_seal(material: SecretMaterial) -> str:
    """The Fernet token (text) that stores ``material``, under the current key."""
    payload = {
        "v": _VERSION,
        "token": material.token,
        "client_cert_pem": material.client_cert_pem,
        "client_key_pem": material.client_key_pem,
    }
    return _current().encrypt(json.dumps(payload).encode()).decode("ascii")


def credentials_open(sealed: str, *, cluster_name: str = "") -> SecretMaterial:
    """The material sealed in ``sealed``; CredentialsUnreadable when no configured key opens it."""
    where = f"cluster {cluster_name!r}" if cluster_name else "this cluster"
    if not sealed:
        raise CredentialsUnreadable(f"{where} has no stored credentials; register them again")
    try:
        raw = _current().decrypt(sealed.encode("ascii"))
    except (InvalidToken, UnicodeEncodeError):
        raise CredentialsUnreadable(
            f"the credentials of {where} cannot be decrypted with the keys in "
            "GPUPOOL_SECRET_KEYS (a key was removed or replaced); restore the old key as a "
            "second entry, or enter the credentials again"
        ) from None
    try:
        payload = json.loads(raw)
        return SecretMaterial(
            token=payload.get("token"),
            client_cert_pem=payload.get("client_cert_pem"),
            client_key_pem=payload.get("client_key_pem"),
        )
    except (ValueError, TypeError, AttributeError):
        raise CredentialsUnreadable(f"the stored credentials of {where} are malformed") from None


def credentials_reseal(sealed: str) -> str:
    """``sealed`` re-encrypted under the current key (MultiFernet.rotate); fails closed."""
    try:
        return _current().rotate(sealed.encode("ascii")).decode("ascii")
    except (InvalidToken, UnicodeEncodeError):
        raise CredentialsUnreadable(
            "stored credentials cannot be decrypted with any key in GPUPOOL_SECRET_KEYS"
        ) from None


def secret_hint(material: SecretMaterial) -> str:
    """What an admin may see: the kind of credential and its last four characters.

    Enough to tell two tokens apart, never enough to use one (a service-account token is
    several hundred characters; its tail is part of the signature).
    """
    if material.token is not None:
        tail = material.token[-4:] if len(material.token) >= 16 else ""
        return f"token …{tail} ({len(material.token)} characters)"
    return "client certificate and key"


def text_seal(plain: str) -> str:
    """Any other secret the portal must read back (a team webhook's signing secret), sealed
    under the same keys as cluster credentials, so it rotates with them."""
    return _current().encrypt(plain.encode()).decode("ascii")


def text_open(sealed: str, *, what: str = "this secret") -> str:
    """The text sealed by :func:`text_seal`; CredentialsUnreadable (naming ``what``) when no
    configured key opens it."""
    try:
        return _current().decrypt(sealed.encode("ascii")).decode()
    except (InvalidToken, UnicodeError):
        raise CredentialsUnreadable(
            f"{what} cannot be decrypted with the keys in GPUPOOL_SECRET_KEYS; set it again"
        ) from None
