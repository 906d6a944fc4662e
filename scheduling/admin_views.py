"""Platform admins' pages for the catalog and team policies (issue 32): GPU models, offering a
card as a shared pool, and each team's policy, edited in the portal with what a change would
affect shown before it is saved.

Every edit is a two-step form without script: *Review changes* shows the effects
(``scheduling.admin_edits``) of exactly what was typed, and *Save these changes* saves only
when what is sent is what was reviewed (a hidden fingerprint); otherwise the review is shown
again. Anyone but a platform admin gets a 403.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render

from portal.errors import ApplicationError
from portal.models import Job, JobState, Priority, Team
from scheduling.admin_edits import (
    gpu_model_clean,
    gpu_model_impact,
    gpu_model_update,
    shared_pool_card_check,
    shared_pool_impact,
    shared_pool_offer,
    team_members_queued,
    team_policy_impact,
)
from scheduling.catalog import mig_whole_gpu
from scheduling.inventory import Node
from scheduling.models import DEFAULT_COHORT_SLUG, Cohort, GpuModel, QuotaChange, TeamPolicy
from scheduling.quota_api import TeamPolicySerializer
from scheduling.services import TEAM_POLICY_FIELDS, team_policy_set

PLATFORM_ONLY = "Only platform admins change the catalog and team policies."


def platform_admin_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @wraps(view)
    @login_required
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_staff:
            return HttpResponseForbidden(PLATFORM_ONLY)
        return view(request, *args, **kwargs)

    return wrapped


def _fingerprint(changes: dict[str, Any]) -> str:
    text = json.dumps(changes, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# ---------------------------------------------------------------------------------------------
# GPU models
# ---------------------------------------------------------------------------------------------
@platform_admin_only
def catalog_page(request: HttpRequest) -> HttpResponse:
    """The catalog: every model with what the scheduler reads of it, its nodes and quotas,
    and links to edit it or offer it as a shared pool."""
    models = list(GpuModel.objects.select_related("shares").order_by("cost_factor", "key"))
    nodes = dict(
        Node.objects.filter(gpu_model__isnull=False)
        .values_list("gpu_model")
        .annotate(n=Count("id"))
        .order_by()
    )
    pools = {m.shares_id: m for m in models if m.shares_id is not None}
    rows = [
        {
            "model": m,
            "nodes": nodes.get(m.pk, 0),
            "pool": pools.get(m.pk),
            "can_share": not m.is_shared
            and not mig_whole_gpu(m.key, m.resource_name)
            and m.pk not in pools,
        }
        for m in models
    ]
    changes = (
        QuotaChange.objects.filter(team__isnull=True, cohort__isnull=True)
        .select_related("gpu_model", "changed_by")
        .order_by("-changed_at", "-id")[:20]
    )
    return render(request, "scheduling/catalog.html", {"rows": rows, "history": changes})


def _model_form_data(post: Any) -> dict[str, Any]:
    data: dict[str, Any] = {k: post.get(k, "") for k in ("display_name", "cost_factor")}
    data.update({k: post.get(k, "") for k in ("memory_gib", "fp16_tflops", "product_labels")})
    for flag in ("active", "bf16", "fp8"):
        data[flag] = post.get(flag) == "on"
    return data


@platform_admin_only
def gpu_model_edit(request: HttpRequest, key: str) -> HttpResponse:
    """Edit one model; *Review changes* first shows what the change would affect."""
    model = get_object_or_404(GpuModel, key=key)
    context: dict[str, Any] = {"model": model, "typed": None, "errors": {}, "effects": None}
    if request.method == "POST":
        data = _model_form_data(request.POST)
        context["typed"] = data
        try:
            changes = gpu_model_clean(model, data)
        except ApplicationError as exc:
            context["errors"] = exc.fields
            return render(request, "scheduling/gpu_model_edit.html", context, status=400)
        fingerprint = _fingerprint(changes)
        if (
            request.POST.get("action") == "save"
            and request.POST.get("reviewed") == fingerprint
            and changes
        ):
            gpu_model_update(model=model, by=request.user, changes=changes)
            n = len(changes)
            messages.success(request, f"Saved {model.key}: {n} field{'s' if n != 1 else ''}.")
            return redirect("catalog")
        context.update(
            effects=gpu_model_impact(model, changes), reviewed=fingerprint, changes=changes
        )
    return render(request, "scheduling/gpu_model_edit.html", context)


@platform_admin_only
def shared_pool_page(request: HttpRequest, key: str) -> HttpResponse:
    """Offer a whole card as a shared pool: what it would be and do, then create it."""
    card = get_object_or_404(GpuModel, key=key)
    context: dict[str, Any] = {"card": card, "errors": {}, "typed": ""}
    try:
        shared_pool_card_check(card)
    except ApplicationError as exc:
        context["errors"] = exc.fields or {"card": [exc.message]}
        context["refused"] = exc.message
        return render(request, "scheduling/shared_pool.html", context, status=400)
    existing = GpuModel.objects.filter(shares=card).first()
    context["existing"] = existing
    cost: float | None = None
    typed = request.POST.get("cost_factor", "").strip() if request.method == "POST" else ""
    context["typed"] = typed
    if typed:
        try:
            cost = float(typed)
        except ValueError:
            context["errors"] = {"cost_factor": ["Must be a number from 0.001 to 1000."]}
    if not context["errors"] and cost is not None and not 0.001 <= cost <= 1000:
        context["errors"] = {"cost_factor": ["Must be a number from 0.001 to 1000."]}
    if context["errors"]:
        context["effects"] = shared_pool_impact(card)
        return render(request, "scheduling/shared_pool.html", context, status=400)
    if request.method == "POST" and existing is None and request.POST.get("action") == "save":
        pool, _ = shared_pool_offer(card=card, by=request.user, cost_factor=cost)
        messages.success(
            request,
            f"{card.key} is offered as the shared pool {pool.key}: give teams GiB of it on the "
            "quota grid.",
        )
        return redirect("catalog")
    context["effects"] = shared_pool_impact(card, cost)
    return render(request, "scheduling/shared_pool.html", context)


# ---------------------------------------------------------------------------------------------
# Team policies
# ---------------------------------------------------------------------------------------------
def _policy_of(team: Team) -> TeamPolicy:
    return TeamPolicy.objects.select_related("cohort").filter(team=team).first() or TeamPolicy(
        team=team
    )


@platform_admin_only
def team_policy_list(request: HttpRequest) -> HttpResponse:
    """Every team's policy at a glance, with its queued jobs, and a link to edit each."""
    teams = list(Team.objects.order_by("name"))
    policies = {p.team_id: p for p in TeamPolicy.objects.select_related("cohort")}
    queued = dict(
        Job.objects.filter(state=JobState.QUEUED)
        .values_list("team")
        .annotate(n=Count("id"))
        .order_by()
    )
    rows = [
        {
            "team": t,
            "policy": policies.get(t.pk) or TeamPolicy(team=t),
            "queued": queued.get(t.pk, 0),
        }
        for t in teams
    ]
    return render(request, "scheduling/team_policies.html", {"rows": rows})


def _policy_form_data(post: Any) -> dict[str, Any]:
    """The page's fields as the API's serializer takes them (empty number: none)."""
    data: dict[str, Any] = {"held": post.get("held") == "on"}
    for name in ("weight", "held_reason", "max_priority"):
        data[name] = post.get(name, "").strip()
    cohort = post.get("cohort", DEFAULT_COHORT_SLUG)
    data["cohort"] = None if cohort == DEFAULT_COHORT_SLUG else cohort
    for name in (
        "max_queued_jobs",
        "max_queued_jobs_per_user",
        "min_runtime_minutes",
        "termination_grace_seconds",
    ):
        value = post.get(name, "").strip()
        data[name] = value if value != "" else None
    return data


def _policy_changes(policy: TeamPolicy, data: dict[str, Any]) -> dict[str, Any]:
    serializer = TeamPolicySerializer(data={"team": policy.team.slug, **data})
    if not serializer.is_valid():
        raise ApplicationError(
            "Invalid team policy.",
            fields={k: [str(e) for e in v] for k, v in serializer.errors.items()},
        )
    values = dict(serializer.validated_data)
    values.pop("team")
    if values.get("cohort") is None and policy.cohort and policy.cohort.slug == DEFAULT_COHORT_SLUG:
        values.pop("cohort")  # the pool's own cohort row is the default, not a change
    return {k: v for k, v in values.items() if k in TEAM_POLICY_FIELDS and getattr(policy, k) != v}


@platform_admin_only
def team_policy_edit(request: HttpRequest, slug: str) -> HttpResponse:
    """Edit one team's policy; *Review changes* first shows what the change would affect."""
    team = get_object_or_404(Team, slug=slug)
    policy = _policy_of(team)
    context: dict[str, Any] = {
        "team": team,
        "policy": policy,
        "typed": None,
        "errors": {},
        "effects": None,
        "cohorts": list(Cohort.objects.exclude(slug=DEFAULT_COHORT_SLUG)),
        "default_cohort": DEFAULT_COHORT_SLUG,
        "priorities": [p.label for p in Priority],
        "queued_by_member": sorted(team_members_queued(team).items(), key=lambda x: -x[1]),
    }
    if request.method == "POST":
        data = _policy_form_data(request.POST)
        context["typed"] = {**data, "cohort": request.POST.get("cohort", DEFAULT_COHORT_SLUG)}
        try:
            changes = _policy_changes(policy, data)
        except ApplicationError as exc:
            context["errors"] = exc.fields
            return render(request, "scheduling/team_policy_edit.html", context, status=400)
        fingerprint = _fingerprint(
            {k: (v.slug if isinstance(v, Cohort) else v) for k, v in changes.items()}
        )
        if (
            request.POST.get("action") == "save"
            and request.POST.get("reviewed") == fingerprint
            and changes
        ):
            team_policy_set(team=team, by=request.user, **changes)
            n = len(changes)
            messages.success(
                request, f"Saved the policy of {team.name}: {n} field{'s' if n != 1 else ''}."
            )
            return redirect("team-policy-list")
        effects, preview = team_policy_impact(team, changes)
        context.update(effects=effects, preview=preview, reviewed=fingerprint, changes=changes)
    return render(request, "scheduling/team_policy_edit.html", context)
