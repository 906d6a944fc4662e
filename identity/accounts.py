"""Finding or creating the portal account behind an external identity."""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction

from identity.models import ExternalIdentity


class SignInRefused(Exception):
    """The provider vouched for someone the portal will not let in (a disabled account)."""


def _free_username(wanted: str) -> str:
    """``wanted`` cleaned to Django's username alphabet, suffixed until no account has it:
    an external sign-in never takes over a local account that happens to share the name."""
    base = re.sub(r"[^\w.@+-]", "-", wanted)[:140] or "user"
    users = get_user_model()._default_manager
    name, n = base, 1
    while users.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def account_for(
    provider: str, subject: str, *, username: str, email: str = "", full_name: str = ""
) -> tuple[AbstractBaseUser, ExternalIdentity]:
    """The account linked to ``provider``/``subject``, created at the first sign-in.

    A disabled account stays disabled: the provider cannot switch it back on."""
    identity = (
        ExternalIdentity.objects.select_related("user")
        .filter(provider=provider, subject=subject)
        .first()
    )
    if identity is not None:
        user = identity.user
        if not user.is_active:
            raise SignInRefused("This account is disabled in the portal.")
        if email and user.email != email:  # type: ignore[attr-defined]
            user.email = email  # type: ignore[attr-defined]
            user.save(update_fields=["email"])
        return user, identity
    try:
        with transaction.atomic():
            first, _, last = full_name.partition(" ")
            user = get_user_model()._default_manager.create_user(
                username=_free_username(username or subject),
                email=email,
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


def disable_account(user: AbstractBaseUser) -> bool:
    """Switch an account off (gone or disabled at the provider): sessions and API tokens stop
    working at once, since both check ``is_active`` on every request."""
    if not user.is_active:
        return False
    user.is_active = False
    user.save(update_fields=["is_active"])
    return True
