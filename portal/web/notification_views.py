"""The in-portal notifications: the bell (a fragment every page loads) and the list."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.notifications import notifications_mark_read, notifications_of, unread_count

PAGE_SIZE = 50
RECENT_SIZE = 10


@login_required
def notification_bell(request: HttpRequest) -> HttpResponse:
    """The nav's bell with the unread count; pages load it after they render (htmx), so no
    page pays a query for it."""
    return render(request, "notifications/_bell.html", {"unread": unread_count(request.user)})


@login_required
def notification_recent(request: HttpRequest) -> HttpResponse:
    """What the bell opens: the newest notifications, the unread ones marked new, and then
    read (opening the bell is reading them). A page of its own without JavaScript (the bell
    is a link to it); the bell's script shows the fragment in a panel under the bell."""
    recent = list(notifications_of(request.user).order_by("-id")[:RECENT_SIZE])
    new = [n.pk for n in recent if n.read_at is None]
    context = {
        "recent": recent,
        "new": set(new),
        # Unread beyond the ten shown stay unread: the full list has them.
        "unread_left": unread_count(request.user) - len(new),
    }
    template = "notifications/_recent.html" if request.htmx else "notifications/recent.html"
    response = render(request, template, context)
    if new:
        notifications_mark_read(user=request.user, ids=new)
    response["Cache-Control"] = "no-store"
    return response


@login_required
def notification_list(request: HttpRequest) -> HttpResponse:
    show = "unread" if request.GET.get("show") == "unread" else "all"
    rows = notifications_of(request.user)
    if show == "unread":
        rows = rows.filter(read_at__isnull=True)
    before = request.GET.get("before", "")
    if before.isdigit():
        rows = rows.filter(id__lt=int(before))
    page = list(rows.order_by("-id")[: PAGE_SIZE + 1])
    context = {
        "notifications": page[:PAGE_SIZE],
        "older": page[PAGE_SIZE - 1].pk if len(page) > PAGE_SIZE else None,
        "show": show,
        "unread": unread_count(request.user),
    }
    return render(request, "notifications/list.html", context)


@login_required
def notification_open(request: HttpRequest, notification_id: int) -> HttpResponse:
    """Mark one notification read and go to its job (the list, for one about no job)."""
    found = notifications_of(request.user).filter(pk=notification_id).first()
    if found is None:
        raise Http404("No such notification.")
    notifications_mark_read(user=request.user, ids=[found.pk])
    if found.job is None:
        return redirect("notification-list")
    return redirect("job-detail", job_id=found.job.public_id)


@login_required
@require_POST
def notification_read_all(request: HttpRequest) -> HttpResponse:
    notifications_mark_read(user=request.user)
    return redirect("notification-list")
