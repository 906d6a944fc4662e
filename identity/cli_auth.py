"""``gpupool login`` through the browser: the loopback flow of native apps (RFC 8252) with
PKCE (RFC 7636, S256 only), as ``gh auth login --web`` and ``gcloud auth login`` do it.

1. The CLI listens on ``127.0.0.1:<port>`` and opens ``/cli/authorize/?port=…&state=…&
   code_challenge=…&machine=…``.
2. The user signs in the usual way (password, LDAP or SSO) and, on the authorize page, says
   yes: :func:`grant_issue` stores a one-time code's digest and the browser is sent to
   ``http://127.0.0.1:<port>/callback?code=…&state=…``. The code is not a token: alone it is
   worth nothing.
3. The CLI posts the code with its verifier to ``POST /api/v1/cli/token/``: :func:`grant_redeem`
   trades it, once, within :data:`CODE_SECONDS`, for a new API token in the response body.

Only loopback callbacks exist: the portal builds the callback URL itself from a port and one of
two loopback host names, so the code can only go to a program on the browser's own machine,
and only the program that made the verifier can use it. The token never travels in a URL.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from urllib.parse import urlencode

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from identity.models import CliGrant
from portal.errors import ApplicationError
from portal.models import ApiToken
from portal.tokens import api_token_create, api_token_revoke

CODE_SECONDS = 120  # a browser hands the code over at once; two minutes leaves room to spare
LOOPBACK_HOSTS = ("127.0.0.1",)  # by number: a name may resolve elsewhere (RFC 8252, 8.3)
PORT_MIN = 1024  # an unprivileged listener: a CLI never runs as root to sign in
PORT_MAX = 65535
_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")  # base64url of a SHA-256 digest, unpadded
_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")  # RFC 7636, 4.1
_STATE = re.compile(r"[\x21-\x7e]{8,200}")  # printable, no spaces
_MACHINE = re.compile(r"[^A-Za-z0-9._-]+")
_PORT = re.compile(r"[0-9]{1,5}")  # ASCII digits only: str.isdigit() also takes "²"


@dataclass(frozen=True)
class CliRequest:
    """What a CLI asked for on the authorize page, checked."""

    port: int
    state: str
    code_challenge: str
    machine: str
    host: str = "127.0.0.1"

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def callback(self, **params: str) -> str:
        """The CLI's listener, with ``params`` (the code or the error) and the state."""
        return f"{self.origin}/callback?" + urlencode({**params, "state": self.state})


def cli_request_parse(params: dict[str, str]) -> CliRequest:
    """The authorize page's query (or its form) as a :class:`CliRequest`; an
    :class:`ApplicationError` naming each field that is wrong otherwise. A callback host other
    than a loopback name is refused: the code must not leave the browser's machine."""
    errors: dict[str, list[str]] = {}
    raw_port = params.get("port", "")
    port = int(raw_port) if _PORT.fullmatch(raw_port) else 0
    if not PORT_MIN <= port <= PORT_MAX:
        errors["port"] = [f"Must be the CLI's loopback port, {PORT_MIN} to {PORT_MAX}."]
    host = params.get("host") or "127.0.0.1"
    if host not in LOOPBACK_HOSTS:
        errors["host"] = ["Only a loopback callback is allowed: 127.0.0.1."]
    state = params.get("state", "")
    if not _STATE.fullmatch(state):
        errors["state"] = ["Must be 8 to 200 printable characters, no spaces."]
    challenge = params.get("code_challenge", "")
    if not _CHALLENGE.fullmatch(challenge):
        errors["code_challenge"] = ["Must be the base64url SHA-256 of the verifier (43 chars)."]
    method = params.get("code_challenge_method") or "S256"
    if method != "S256":
        errors["code_challenge_method"] = ["Only S256 is supported."]
    machine = _MACHINE.sub("-", params.get("machine", "")).strip("-.")[:63] or "unknown host"
    if errors:
        raise ApplicationError("This is not a valid sign-in request from gpupool.", fields=errors)
    return CliRequest(port=port, state=state, code_challenge=challenge, machine=machine, host=host)


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def challenge_of(verifier: str) -> str:
    """PKCE S256: the base64url SHA-256 of the verifier, unpadded."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def grant_issue(
    *, user: AbstractBaseUser, request: CliRequest, now: dt.datetime | None = None
) -> str:
    """Store a one-time code for ``user`` and return the callback URL that carries it."""
    now = now or timezone.now()
    # The user's codes of yesterday and before go: each is long expired and, used or not,
    # worth nothing now (no beat task needed for a table that grows one row per login).
    CliGrant.objects.filter(user=user, expires_at__lt=now - dt.timedelta(days=1)).delete()
    code = secrets.token_urlsafe(32)
    CliGrant.objects.create(
        user=user,
        code_digest=_digest(code),
        code_challenge=request.code_challenge,
        machine=request.machine,
        expires_at=now + dt.timedelta(seconds=CODE_SECONDS),
    )
    return request.callback(code=code)


def token_name(machine: str) -> str:
    return f"gpupool CLI on {machine}"


_REFUSED = "This code is unknown, expired or already used: run `gpupool login` again."
_SPOILED = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
"""The expiry a grant gets once a second trade was tried: whatever the first one does next."""


def grant_redeem(
    *, code: str, verifier: str, now: dt.datetime | None = None
) -> tuple[ApiToken, str]:
    """Trade ``code`` and its PKCE ``verifier`` for a new API token: (the row, the secret).

    A code is tried once: the first attempt marks it used whatever its outcome (a compare-and-
    set, so two attempts at once cannot both win), so a wrong verifier cannot be followed by a
    guess. A code used before is refused and the token it was traded for is revoked, since
    whoever holds the code now may have that token too (RFC 6749, 4.1.2)."""
    now = now or timezone.now()
    grant = CliGrant.objects.select_related("user").filter(code_digest=_digest(code)).first()
    if grant is None:
        raise ApplicationError(_REFUSED, fields={"code": ["Unknown code."]})
    # Autocommit, not inside the token's transaction: a refusal below must keep the code used.
    won = CliGrant.objects.filter(pk=grant.pk, used_at__isnull=True).update(used_at=now)
    if not won:
        # Spoil the grant, then revoke what it gave, read again: a first trade still running
        # (its token not recorded yet) finds the grant spoiled and rolls its token back.
        CliGrant.objects.filter(pk=grant.pk).update(expires_at=_SPOILED)
        given = CliGrant.objects.filter(pk=grant.pk).values_list("token_id", flat=True).first()
        if given is not None:
            api_token_revoke(token=ApiToken(pk=given), now=now)
        raise ApplicationError(_REFUSED, fields={"code": ["This code was already used."]})
    if grant.expires_at <= now:
        raise ApplicationError(_REFUSED, fields={"code": ["This code has expired."]})
    if not hmac.compare_digest(challenge_of(verifier), grant.code_challenge):
        raise ApplicationError(
            "The code verifier does not match this sign-in: run `gpupool login` again.",
            fields={"code_verifier": ["Does not match the code_challenge."]},
        )
    if not grant.user.is_active:
        raise ApplicationError(_REFUSED, fields={"code": ["The account is inactive."]})
    with transaction.atomic():
        # One CLI token per machine: the one an earlier login there saved is replaced, not
        # left to pile up valid until it expires.
        for earlier in ApiToken.objects.filter(
            user=grant.user, name=token_name(grant.machine), revoked_at__isnull=True
        ):
            api_token_revoke(token=earlier, now=now)
        token, raw = api_token_create(user=grant.user, name=token_name(grant.machine), now=now)
        recorded = CliGrant.objects.filter(pk=grant.pk).exclude(expires_at=_SPOILED)
        if not recorded.update(token=token):  # a second trade of this code came first
            raise ApplicationError(_REFUSED, fields={"code": ["This code was already used."]})
    return token, raw
