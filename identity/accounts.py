"""Finding or creating the portal account behind an external identity.

The linking rule, for OpenID Connect and LDAP alike: an external identity reaches a portal
account only through a stored link (``ExternalIdentity``: the provider and its stable id for
the person, OIDC's ``sub`` or the directory entry's ``entryUUID``), never because a username or
an e-mail matches. A first sign-in whose name is already taken gets an account of its own
(``admin-2``) or is refused, as ``GPUPOOL_EXTERNAL_NAME_COLLISION`` says. A local account with a
usable password (the break-glass admin) is never signed in, changed or disabled by a provider.
What a provider says about a person (name, e-mail) is checked like form input before it is
stored, and an e-mail that another account already has is not taken over.
"""

from __future__ import annotations

import logging
import re
import unicodedata

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator
from django.db import IntegrityError, transaction

from identity.models import ExternalIdentity

log = logging.getLogger(__name__)

NAME_COLLISION_SUFFIX = "suffix"
NAME_COLLISION_REFUSE = "refuse"


class SignInRefused(Exception):
    """The provider vouched for someone the portal will not let in (a disabled account, a
    local account, a name that is taken where the admin chose to refuse)."""


def _without_controls(value: str) -> str:
    """``value`` with control and format characters (CR, LF, NUL, bidi overrides) removed:
    they have no place in a name, and in a header or a log line they forge structure."""
    return "".join(c for c in value if unicodedata.category(c)[0] != "C").strip()


def clean_name(value: object, limit: int = 150) -> str:
    """A provider's display name, as a form field would keep it."""
    return _without_controls(str(value or ""))[:limit]


def clean_email(value: object, who: str) -> str:
    """A provider's e-mail claim when it is an e-mail address and nothing else; "" otherwise
    (logged), so a sign-in never stores a forged header or a malformed address."""
    raw = str(value or "")
    if not raw:
        return ""
    email = raw.strip()
    if email != _without_controls(email) or len(email) > 254:
        log.warning("sign-in of %s: e-mail claim with control characters ignored", who)
        return ""
    try:
        EmailValidator()(email)
    except ValidationError:
        log.warning("sign-in of %s: e-mail claim %r is not an address; ignored", who, email[:80])
        return ""
    return email


def _email_owned_elsewhere(email: str, user_pk: int | None) -> bool:
    users = get_user_model()._default_manager.filter(email__iexact=email)
    if user_pk is not None:
        users = users.exclude(pk=user_pk)
    return users.exists()


def _email_for(email: str, user_pk: int | None, who: str) -> str:
    """``email`` unless another account already has it: one person's address never becomes
    another account's (password resets and unlock links go to it)."""
    if email and _email_owned_elsewhere(email, user_pk):
        log.warning("sign-in of %s: e-mail %s belongs to another account; not taken", who, email)
        return ""
    return email


def username_base(wanted: str) -> str:
    """``wanted`` cleaned to Django's username alphabet (control characters and everything else
    outside it become ``-``)."""
    return re.sub(r"[^\w.@+-]", "-", _without_controls(wanted))[:140] or "user"


def _username_taken(name: str) -> bool:
    return get_user_model()._default_manager.filter(username__iexact=name).exists()


def _free_username(wanted: str) -> str:
    """``wanted`` cleaned, suffixed until no account has it (in any letter case): an external
    sign-in never takes over a local account that happens to share the name."""
    base = username_base(wanted)
    if not _username_taken(base):
        return base
    if settings.GPUPOOL_EXTERNAL_NAME_COLLISION == NAME_COLLISION_REFUSE:
        raise SignInRefused(
            f"The name {base!r} belongs to another portal account, so this sign-in cannot "
            "make yours. Ask a platform admin to rename that account."
        )
    n = 2
    while _username_taken(f"{base}-{n}"):
        n += 1
    return f"{base}-{n}"


def provider_may_manage(user: AbstractBaseUser) -> bool:
    """Whether a provider's sign-in or sync may act on ``user``: never on an account with a
    usable local password, whatever link it has."""
    return not user.has_usable_password()


def account_for(
    provider: str, subject: str, *, username: str, email: str = "", full_name: str = ""
) -> tuple[AbstractBaseUser, ExternalIdentity]:
    """The account linked to ``provider``/``subject``, created at the first sign-in.

    A disabled account stays disabled (the provider cannot switch it back on), and a local
    account is never reached, even through a link an admin made by hand."""
    who = f"{provider}:{subject}"
    email = clean_email(email, who)
    identity = (
        ExternalIdentity.objects.select_related("user")
        .filter(provider=provider, subject=subject)
        .first()
    )
    if identity is not None:
        return _linked_account(identity, email, who), identity
    try:
        with transaction.atomic():
            first, _, last = clean_name(full_name, 301).partition(" ")
            user = get_user_model()._default_manager.create_user(
                username=_free_username(username or subject),
                email=_email_for(email, None, who),
                first_name=first[:150],
                last_name=last[:150],
            )  # no password: unusable, so local sign-in cannot reach it
            identity = ExternalIdentity.objects.create(
                user=user, provider=provider, subject=subject
            )
    except IntegrityError:  # the same first sign-in twice at once: the other one won
        identity = ExternalIdentity.objects.select_related("user").get(
            provider=provider, subject=subject
        )
    return identity.user, identity


def _linked_account(identity: ExternalIdentity, email: str, who: str) -> AbstractBaseUser:
    user = identity.user
    if not provider_may_manage(user):
        log.warning("sign-in of %s refused: %s has a local password", who, user.get_username())
        raise SignInRefused(
            "This sign-in is linked to a portal account with a local password, which only its "
            "password can open."
        )
    if not user.is_active:
        raise SignInRefused("This account is disabled in the portal.")
    email = _email_for(email, user.pk, who)
    if email and user.email != email:  # type: ignore[attr-defined]
        user.email = email  # type: ignore[attr-defined]
        user.save(update_fields=["email"])
    return user


def disable_account(user: AbstractBaseUser) -> bool:
    """Switch an account off (gone or disabled at the provider): sessions stop working at once,
    since they check ``is_active`` on every request, and API tokens within the seconds a web
    process remembers one (``GPUPOOL_API_TOKEN_CACHE_SECONDS``, portal/tokens.py). An account
    with a local password is left alone: no provider may lock out the break-glass admin."""
    if not user.is_active or not provider_may_manage(user):
        return False
    user.is_active = False
    user.save(update_fields=["is_active"])
    return True
