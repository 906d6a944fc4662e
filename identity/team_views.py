"""Team admins manage their own team's members in the portal: add an existing account, change
a role, remove someone. Memberships a provider's groups made are shown but only the rules
change them. Platform admins may manage every team. Every change is audited."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from identity.invitations import (
    accounts_search,
    invitation_accept,
    invitation_create,
    invitation_find,
    pending_invitations,
)
from identity.models import MembershipAudit
from portal.errors import ApplicationError
from portal.models import Membership, Role, Team, TeamChange


def _admin_teams(user) -> list[Team]:  # type: ignore[no-untyped-def]
    if user.is_staff:
        return list(Team.objects.all())
    return list(Team.objects.filter(memberships__user=user, memberships__role=Role.ADMIN))


def _team_for_admin(request: HttpRequest, slug: str) -> Team:
    """The team, when the caller may manage it; another team is a 404, not a hint it exists."""
    team = get_object_or_404(Team, slug=slug)
    if request.user.is_staff:  # type: ignore[union-attr]
        return team
    if not Membership.objects.filter(user=request.user, team=team, role=Role.ADMIN).exists():
        raise Http404("No such team.")
    return team


@login_required
def team_list(request: HttpRequest) -> HttpResponse:
    return render(request, "identity/teams.html", {"teams": _admin_teams(request.user)})


def _audit(request: HttpRequest, team: Team, user, action: str, detail: str) -> None:  # type: ignore[no-untyped-def]
    MembershipAudit.objects.create(
        actor=request.user, source="portal", team=team, user=user, action=action, detail=detail
    )


def _add(request: HttpRequest, team: Team) -> dict[str, str]:
    username = request.POST.get("username", "").strip()
    role = request.POST.get("role", "")
    errors: dict[str, str] = {}
    if role not in Role.values:
        errors["role"] = "Choose viewer, member or team admin."
    user = get_user_model()._default_manager.filter(username=username, is_active=True).first()
    if user is None:
        errors["username"] = "No active account has that username (they sign in once first)."
    elif Membership.objects.filter(team=team, user=user).exists():
        errors["username"] = "Already a member of this team."
    if not errors:
        Membership.objects.create(team=team, user=user, role=role)
        _audit(request, team, user, "member-added", role)
    return errors


def _invite(request: HttpRequest, team: Team) -> tuple[dict[str, str], dict[str, object] | None]:
    """An invitation by e-mail: the link is mailed and shown once to the admin."""
    link = request.build_absolute_uri(reverse("invitation-accept", args=["TOKEN"]))
    try:
        invitation, url, mailed = invitation_create(
            team=team,
            by=request.user,
            email=request.POST.get("email", ""),
            role=request.POST.get("role", ""),
            link_for=link.replace("TOKEN", "{token}"),
        )
    except ApplicationError as exc:
        return {k: " ".join(v) for k, v in exc.fields.items()} or {"email": exc.message}, None
    return {}, {"email": invitation.email, "role": invitation.role, "link": url, "mailed": mailed}


def _withdraw(request: HttpRequest, team: Team) -> dict[str, str]:
    """Withdraw a pending invitation of this team (its link stops working)."""
    raw = request.POST.get("invitation", "")
    invitation = pending_invitations(team).filter(pk=raw if raw.isdigit() else -1).first()
    if invitation is None:
        return {"invitation": "No such pending invitation of this team."}
    _audit(request, team, None, "invitation-withdrawn", invitation.email)
    invitation.delete()
    return {}


@login_required
@require_http_methods(["GET", "POST"])
def invitation_open(request: HttpRequest, token: str) -> HttpResponse:
    """The invitation link: signed in (the login page sends the invitee back here), the
    opener sees which team and role, and joins with a button (a POST: a link alone, say in
    an image, never changes anyone's teams)."""
    try:
        if request.method == "POST":
            team = invitation_accept(token=token, user=request.user)
            messages.success(request, f"You are in team {team.name}.")
            return redirect(reverse("job-list") + "?scope=team")
        invitation = invitation_find(token)
    except ApplicationError as exc:
        messages.error(request, " ".join(exc.fields.get("token", [exc.message])))
        return redirect("job-list")
    return render(request, "identity/invitation.html", {"invitation": invitation})


def _hand_made(team: Team, raw_id: str) -> Membership | None:
    membership = (
        Membership.objects.select_for_update()
        .filter(team=team, pk=raw_id if raw_id.isdigit() else -1)
        .select_related("user")
        .first()
    )
    if membership is None or hasattr(membership, "provider_mark"):
        return None
    return membership


def _change(request: HttpRequest, team: Team, action: str) -> dict[str, str]:
    membership = _hand_made(team, request.POST.get("membership", ""))
    if membership is None:
        return {"membership": "Not a hand-made membership of this team (group ones follow rules)."}
    if membership.user_id == request.user.pk and not request.user.is_staff:  # type: ignore[union-attr]
        return {"membership": "You cannot change or remove your own team admin role."}
    if action == "remove":
        _audit(request, team, membership.user, "member-removed", membership.role)
        membership.delete()
        return {}
    role = request.POST.get("role", "")
    if role not in Role.values:
        return {"role": "Choose viewer, member or team admin."}
    if role != membership.role:
        _audit(request, team, membership.user, "role-changed", f"{membership.role} → {role}")
        membership.role = role
        membership.save(update_fields=["role"])
    return {}


@login_required
@require_http_methods(["GET", "POST"])
def team_members(request: HttpRequest, slug: str) -> HttpResponse:
    team = _team_for_admin(request, slug)
    errors: dict[str, str] = {}
    invited = None
    if request.method == "POST":
        action = request.POST.get("action", "")
        if action == "invite":
            errors, invited = _invite(request, team)
        else:
            with transaction.atomic():
                if action == "add":
                    errors = _add(request, team)
                elif action in {"role", "remove"}:
                    errors = _change(request, team, action)
                elif action == "withdraw":
                    errors = _withdraw(request, team)
                else:
                    errors = {"action": "Unknown action."}
        if not errors and invited is None:
            return redirect("team-members", slug=team.slug)
    q = request.GET.get("q", "")
    members = (
        Membership.objects.filter(team=team)
        .select_related("user", "provider_mark")
        .order_by("user__username")
    )
    audit = MembershipAudit.objects.filter(team=team).select_related("actor", "user")[:50]
    # The team's templates and hooks, audited in the core (portal.models.TeamChange).
    changes = TeamChange.objects.filter(team=team).select_related("actor")[:50]
    return render(
        request,
        "identity/team_members.html",
        {
            "team": team,
            "members": members,
            "roles": Role.choices,
            "errors": errors,
            "audit": audit,
            "changes": changes,
            "posted": request.POST if errors else {},
            "q": q,
            "found": accounts_search(team=team, q=q) if q else None,
            "invited": invited,
            "invitations": pending_invitations(team),
        },
        status=400 if errors else 200,
    )
