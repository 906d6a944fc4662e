"""An account's owner unlocks its login: a link sent to the account's e-mail forgets the
failures counted under its name (django-axes), so anyone who knows a username can hold its
owner out for the cool-off at most until the owner reads their mail.

The page answers the same whether or not the name or address belongs to an account, and sends
at most one mail per account per ``GPUPOOL_UNLOCK_MAIL_INTERVAL_SECONDS``. The link is a token
over the account's password hash, last login and e-mail (Django's reset tokens, with a salt
of its own): it stops working once the owner signs in. Opening it shows a button; only the
POST unlocks, so a mail scanner that follows links unlocks nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from axes.utils import reset as axes_reset
from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.core.cache import cache
from django.core.mail import send_mail
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_decode, urlsafe_base64_encode
from django.views.decorators.http import require_http_methods

from portal.web.lockout import login_name_key

log = logging.getLogger(__name__)


class UnlockTokens(PasswordResetTokenGenerator):
    key_salt = "gpupool.identity.unlock"


unlock_tokens = UnlockTokens()


class UnlockForm(forms.Form):
    who = forms.CharField(label="Username or e-mail", max_length=254, strip=True)

    def clean_who(self) -> str:
        who = self.cleaned_data["who"]
        if any(ord(c) < 32 or c == "\x7f" for c in who):
            raise forms.ValidationError("Enter a username or an e-mail address.")
        return who


def _account_named(who: str) -> Any | None:
    """The active account with an e-mail that ``who`` names (its username in any case, or its
    e-mail), if exactly one does."""
    users = get_user_model()._default_manager.filter(is_active=True).exclude(email="")
    found = list(users.filter(Q(username__iexact=who) | Q(email__iexact=who))[:2])
    return found[0] if len(found) == 1 else None


MAIL_SENT_KEY = "gpupool:unlock-mail"


def _send_link(request: HttpRequest, user: Any) -> None:
    if not cache.add(
        f"{MAIL_SENT_KEY}:{user.pk}", 1, settings.GPUPOOL_UNLOCK_MAIL_INTERVAL_SECONDS
    ):
        return  # one mail per interval: the form is no way to flood someone's inbox
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    link = request.build_absolute_uri(
        reverse("login-unlock-confirm", args=[uid, unlock_tokens.make_token(user)])
    )
    body = (
        f"Someone (perhaps you) asked to unlock the gpupool login of {user.get_username()}.\n\n"
        f"Open this link and press the button to unlock it:\n{link}\n\n"
        "If the login was locked by failed attempts you did not make, someone is guessing your "
        "password: tell your platform admins. The link stops working once you sign in.\n"
    )
    try:
        send_mail("Unlock your gpupool login", body, None, [user.email])
    except Exception:  # the page says the same either way; the reason goes to the log
        log.exception("unlock mail to %s not sent", user.get_username())


@require_http_methods(["GET", "POST"])
def unlock_request(request: HttpRequest) -> HttpResponse:
    """Ask for an unlock link by username or e-mail."""
    form = UnlockForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = _account_named(form.cleaned_data["who"])
        if user is not None:
            _send_link(request, user)
        return render(request, "auth/unlock_sent.html")
    status = 400 if request.method == "POST" else 200
    return render(request, "auth/unlock.html", {"form": form}, status=status)


def _user_from(uidb64: str) -> Any | None:
    try:
        pk = int(urlsafe_base64_decode(uidb64).decode())
    except (ValueError, UnicodeDecodeError):
        return None
    return get_user_model()._default_manager.filter(pk=pk, is_active=True).first()


@require_http_methods(["GET", "POST"])
def unlock_confirm(request: HttpRequest, uidb64: str, token: str) -> HttpResponse:
    """The link from the mail: a button (GET), which unlocks (POST)."""
    user = _user_from(uidb64)
    if user is None or not unlock_tokens.check_token(user, token):
        return render(request, "auth/unlock_done.html", {"valid": False}, status=400)
    if request.method == "GET":
        return render(request, "auth/unlock_confirm.html", {"account": user.get_username()})
    forgotten = axes_reset(username=login_name_key(user.get_username()))
    log.info("login of %s unlocked by its owner (%d attempts forgotten)", user, forgotten)
    return render(request, "auth/unlock_done.html", {"valid": True})
