"""Pages: your notification settings (events × channels, the wait threshold, the delivery
log) and a team's webhooks (its admins)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from notifications.addresses import (
    email_address_remove,
    email_address_request,
    email_address_verify,
)
from notifications.models import Delivery, EmailVerification
from notifications.preferences import EVENTS, PERSONAL_CHANNELS, preferences_of, preferences_set
from notifications.webhooks import (
    DEFAULT_WEBHOOK_EVENTS,
    TEAM_EVENT_WORDS,
    SendOutcome,
    delivery_redeliver,
    team_for_webhooks,
    team_webhook_deliveries,
    webhook_create,
    webhook_delete,
    webhook_test_send,
    webhooks_of,
)
from portal.access import team_roles_of
from portal.errors import ApplicationError, Forbidden, NotFound
from portal.models import Role, Team

LOG_SIZE = 50


def _team(request: HttpRequest, slug: str) -> Team:
    """The team whose webhooks the caller manages: another team is a 404, a member a 403."""
    try:
        return team_for_webhooks(request.user, slug)
    except NotFound:
        raise Http404("No such team.") from None
    except Forbidden as exc:
        raise PermissionDenied(exc.message) from None


@login_required
def notification_settings(request: HttpRequest) -> HttpResponse:
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        events = {k: [c for c in PERSONAL_CHANNELS if request.POST.get(f"{k}:{c}")] for k in EVENTS}
        raw = request.POST.get("wait_threshold_minutes", "").strip()
        wait: Any = None
        if raw:
            wait = int(raw) if raw.isascii() and raw.isdigit() else raw
        try:
            preferences_set(
                user=request.user, data={"events": events, "wait_threshold_minutes": wait}
            )
        except ApplicationError as exc:
            errors = exc.fields or {"__all__": [exc.message]}
        else:
            messages.success(request, "Notification settings saved.")
            return redirect("notification-settings")
    return _settings_page(request, errors=errors)


def _settings_page(
    request: HttpRequest,
    *,
    errors: dict[str, list[str]] | None = None,
    email_errors: dict[str, list[str]] | None = None,
) -> HttpResponse:
    """The settings page, with the errors of whichever of its forms was just sent."""
    errors = errors or {}
    prefs = preferences_of(request.user.pk)
    pending = EmailVerification.objects.filter(user_id=request.user.pk).first()
    rows = [
        {"kind": k, "label": label, "email": "email" in prefs.channels_for(k)}
        for k, label in EVENTS.items()
        if request.user.is_staff or not k.startswith("cluster.")
    ]
    admin_of = [tid for tid, role in team_roles_of(request.user).items() if role == Role.ADMIN]
    context = {
        "rows": rows,
        "wait": prefs.wait_threshold_minutes,
        "errors": errors,
        "deliveries": Delivery.objects.filter(user_id=request.user.pk)
        .select_related("notification", "webhook")
        .order_by("-id")[:LOG_SIZE],
        "admin_teams": Team.objects.filter(pk__in=admin_of).order_by("name"),
        "pending_email": pending,
        "email_errors": email_errors or {},
        # what was typed, after an error; else the address waiting for its link, if any
        "email_value": request.POST.get("email", "")
        if email_errors
        else (pending.address if pending else ""),
    }
    status = 400 if errors or email_errors else 200
    return render(request, "notifications/settings.html", context, status=status)


@login_required
@require_POST
def notification_email(request: HttpRequest) -> HttpResponse:
    """Set (a link is mailed to the address; it counts once opened) or remove one's own
    e-mail address."""
    if request.POST.get("remove"):
        email_address_remove(user=request.user)
        messages.success(request, "E-mail address removed: nothing will be e-mailed to you.")
        return redirect("notification-settings")
    link = request.build_absolute_uri(reverse("notification-email-verify", args=["TOKEN"])).replace(
        "TOKEN", "{token}"
    )
    try:
        pending = email_address_request(
            user=request.user, address=request.POST.get("email", ""), link_for=link
        )
    except ApplicationError as exc:
        return _settings_page(request, email_errors=exc.fields or {"email": [exc.message]})
    messages.success(
        request,
        f"We sent a link to {pending.address}: open it to start receiving e-mail there.",
    )
    return redirect("notification-settings")


@login_required
def notification_email_verify(request: HttpRequest, token: str) -> HttpResponse:
    """The link from the confirmation e-mail: the address becomes the account's own."""
    try:
        address = email_address_verify(user=request.user, token=token)
    except ApplicationError as exc:
        messages.error(request, " ".join(exc.fields.get("token", [exc.message])))
    else:
        messages.success(request, f"E-mail address {address} confirmed.")
    return redirect("notification-settings")


@login_required
def team_webhooks(request: HttpRequest, team: str) -> HttpResponse:
    found = _team(request, team)
    created = None
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        try:
            hook, secret = webhook_create(
                team=found,
                by=request.user,
                name=request.POST.get("name", ""),
                url=request.POST.get("url", ""),
                format=request.POST.get("format") or None,
                events=request.POST.getlist("events"),
            )
        except ApplicationError as exc:
            errors = exc.fields or {"__all__": [exc.message]}
        else:
            created = {"name": hook.name, "secret": secret}
    form = request.POST if errors else {}
    chosen = set(request.POST.getlist("events")) if errors else set(DEFAULT_WEBHOOK_EVENTS)
    context = {
        "team": found,
        "webhooks": [
            # in the form's order (the events' order in a job's life), in words
            {"hook": w, "events": [words for k, words in TEAM_EVENT_WORDS.items() if k in w.events]}
            for w in webhooks_of(found)
        ],
        # the form keeps what was typed and chosen after an error (format and events too)
        "kinds": [
            {"kind": k, "words": words, "checked": k in chosen}
            for k, words in TEAM_EVENT_WORDS.items()
        ],
        "format": form.get("format", "webhook") if form else "webhook",
        "deliveries": team_webhook_deliveries(found),
        "created": created,
        "errors": errors,
        "form": form,
    }
    return render(request, "notifications/webhooks.html", context, status=400 if errors else 200)


def _outcome_message(request: HttpRequest, what: str, outcome: SendOutcome) -> None:
    if outcome.ok and outcome.status:
        messages.success(request, f"{what} arrived: the receiver answered {outcome.status}.")
    elif outcome.ok and outcome.state == "sent":
        messages.success(request, f"{what} arrived: the receiver answered with a 2xx.")
    elif outcome.ok:  # a worker claimed it first
        messages.success(request, f"{what} is on its way.")
    elif outcome.state == "pending":
        messages.error(request, f"{what} failed: {outcome.words}. It will be tried again.")
    else:
        messages.error(request, f"{what} failed: {outcome.words}.")


@login_required
@require_POST
def team_webhook_test(request: HttpRequest, team: str, webhook_id: int) -> HttpResponse:
    """Send a test to the webhook now and say on the page how it went."""
    found = _team(request, team)
    try:
        outcome = webhook_test_send(team=found, webhook_id=webhook_id, by=request.user)
    except NotFound:
        raise Http404("No such webhook.") from None
    _outcome_message(request, "The test", outcome)
    return redirect("team-webhooks", team=found.slug)


@login_required
@require_POST
def team_webhook_redeliver(request: HttpRequest, team: str, delivery_id: int) -> HttpResponse:
    """Send a delivery of the team's log again now (same idempotency key)."""
    found = _team(request, team)
    try:
        outcome = delivery_redeliver(team=found, delivery_id=delivery_id, by=request.user)
    except NotFound:
        raise Http404("No such delivery.") from None
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        _outcome_message(request, "The redelivery", outcome)
    return redirect(reverse("team-webhooks", args=[found.slug]) + "#deliveries")


@login_required
@require_POST
def team_webhook_delete(request: HttpRequest, team: str, webhook_id: int) -> HttpResponse:
    found = _team(request, team)
    try:
        webhook_delete(team=found, webhook_id=webhook_id, by=request.user)
    except NotFound:  # gone already, another team's, or never there: the same 404
        raise Http404("No such webhook.") from None
    messages.success(request, "Webhook removed.")
    return redirect("team-webhooks", team=found.slug)
