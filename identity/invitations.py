"""Team admins find accounts to add, or invite someone by e-mail.

*Search* looks among the portal's active accounts (username, name) for people not yet in
the team; it shows usernames and names only, never e-mail addresses nor other teams.
*Invitations*: a link mailed to an address (and shown once to the admin, to pass on if the
mail goes astray). Whoever opens it signed in joins the team. The link is the proof: an
account that merely carries the invited address does not join by signing in, since an
identity provider may hand the portal an address its user typed and never confirmed. Only a
hash of the token is kept.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from identity.models import Invitation, MembershipAudit
from portal.errors import ApplicationError
from portal.models import Membership, Role, Team

log = logging.getLogger(__name__)

INVITATION_DAYS = 7
SEARCH_LIMIT = 20


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def accounts_search(*, team: Team, q: str) -> list[Any]:
    """Active accounts whose username or name contains ``q`` (2+ characters), not in
    ``team`` already: what a team admin picks from to add someone."""
    q = " ".join(q.split())[:100]
    if len(q) < 2:
        return []
    users = get_user_model()._default_manager.filter(is_active=True)
    match = Q(username__icontains=q) | Q(first_name__icontains=q) | Q(last_name__icontains=q)
    return list(
        users.filter(match)
        .exclude(memberships__team=team)
        .order_by("username")
        .only("username", "first_name", "last_name")[:SEARCH_LIMIT]
    )


def invitation_create(
    *, team: Team, by: Any, email: Any, role: Any, link_for: str
) -> tuple[Invitation, str, bool]:
    """A new invitation (an older pending one for the same address and team is replaced),
    its link (``link_for`` with ``{token}``), and whether the mail went out. Bad input is an
    ApplicationError naming the field; nothing is stored then."""
    address = email.strip() if isinstance(email, str) else ""
    try:
        validate_email(address)
    except ValidationError:
        raise ApplicationError(
            "Invalid e-mail address.", fields={"email": ["Enter a valid e-mail address."]}
        ) from None
    if role not in Role.values:
        raise ApplicationError("Invalid role.", fields={"role": ["viewer, member or admin."]})
    if Membership.objects.filter(team=team, user__email__iexact=address).exists():
        raise ApplicationError(
            "Already a member.", fields={"email": ["Someone with this address is a member."]}
        )
    token = secrets.token_urlsafe(32)
    now = timezone.now()
    with transaction.atomic():
        Invitation.objects.filter(
            team=team, email__iexact=address, accepted_at__isnull=True
        ).delete()
        invitation = Invitation.objects.create(
            team=team,
            email=address,
            role=role,
            token_hash=_hash(token),
            invited_by=by,
            created_at=now,
            expires_at=now + dt.timedelta(days=INVITATION_DAYS),
        )
        MembershipAudit.objects.create(
            actor=by, source="portal", team=team, action="invited", detail=f"{address} as {role}"
        )
    link = link_for.format(token=token)
    who = getattr(by, "username", "") or "A team admin"
    try:
        send_mail(
            subject=f"[gpupool] {who} invites you to team {team.name}",
            message=(
                f"{who} invites you to join team {team.name} on gpupool as {role}.\n\n"
                f"Open this link and sign in to join (valid {INVITATION_DAYS} days):\n{link}\n"
            ),
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=[address],
        )
        mailed = True
    except (OSError, ValueError):  # smtplib's errors are OSError; the link still works
        log.warning("invitation mail to %s for team %s failed", address, team.slug, exc_info=True)
        mailed = False
    return invitation, link, mailed


def pending_invitations(team: Team) -> QuerySet[Invitation]:
    return Invitation.objects.filter(
        team=team, accepted_at__isnull=True, expires_at__gt=timezone.now()
    ).order_by("-created_at")


def _join(invitation: Invitation, user: Any) -> bool:
    """Make ``user`` a member as invited (a membership they have is kept as it is); marks
    the invitation used. Returns whether they joined (False: a member already)."""
    now = timezone.now()
    taken = Invitation.objects.filter(pk=invitation.pk, accepted_at__isnull=True).update(
        accepted_at=now, accepted_by=user
    )
    if not taken:  # opened twice at once: the first one joins
        return False
    _, created = Membership.objects.get_or_create(
        team=invitation.team, user=user, defaults={"role": invitation.role}
    )
    if created:
        MembershipAudit.objects.create(
            actor=invitation.invited_by,
            source="portal",
            team=invitation.team,
            user=user,
            action="member-added",
            detail=f"{invitation.role}, by invitation to {invitation.email}",
        )
    return created


def invitation_find(token: str) -> Invitation:
    """The pending invitation of a link, to show before joining; a used, expired or unknown
    link is an ApplicationError naming ``token``."""
    invitation = (
        Invitation.objects.select_related("team", "invited_by")
        .filter(token_hash=_hash(token))
        .first()
    )
    _check(invitation)
    assert invitation is not None  # for mypy: _check raised otherwise
    return invitation


def _check(invitation: Invitation | None) -> None:
    if invitation is None or invitation.accepted_at is not None:
        raise ApplicationError(
            "Invalid invitation.",
            fields={"token": ["This invitation link was used or is unknown."]},
        )
    if invitation.expires_at <= timezone.now():
        raise ApplicationError(
            "Expired invitation.",
            fields={"token": ["This invitation has expired: ask the team admin for a new one."]},
        )


@transaction.atomic
def invitation_accept(*, token: str, user: Any) -> Team:
    """The link's opener, signed in, joins the team. A used, expired or unknown link is an
    ApplicationError naming ``token``."""
    invitation = (
        Invitation.objects.select_for_update(of=("self",))
        .select_related("team", "invited_by")
        .filter(token_hash=_hash(token))
        .first()
    )
    _check(invitation)
    assert invitation is not None  # for mypy: _check raised otherwise
    _join(invitation, user)
    return invitation.team
