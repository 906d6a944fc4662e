"""Platform admins' edits of the catalog and of team policies, outside the Django admin: what
a change would affect, counted from the real data before it is saved, and the audited saves.

Every impact is a list of :class:`Effect` sentences with the numbers ("3 queued jobs of team
vision would exceed the new queue limit"), read in a few grouped queries: queued jobs are
grouped by what they ask for, and each group's candidate models are resolved by the engine's
own ``resolve_candidates`` against the catalog as it is and as it would be.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Sum
from django.utils import timezone

from portal.errors import ApplicationError
from portal.models import HOLDING_STATES, Job, JobState, Priority, Team
from rules import engine
from scheduling.catalog import catalog_forget, mig_whole_gpu, shared_pool_create
from scheduling.inventory import Node
from scheduling.matching import REQUIREMENT_FIELDS, requirement_of
from scheduling.models import GpuModel, Quota, QuotaChange, TeamPolicy, UsageRecord
from scheduling.preview import KEEP, Proposal, TeamProposal, preview_changes
from scheduling.snapshot import engine_model

# The catalog fields a platform admin edits on the portal's page and their words.
GPU_MODEL_FIELDS = (
    "display_name",
    "active",
    "cost_factor",
    "memory_gib",
    "fp16_tflops",
    "bf16",
    "fp8",
    "product_labels",
)


@dataclass(frozen=True)
class Effect:
    """One consequence of a proposed change, in words; ``warn`` when it stops or refuses
    something a user would notice."""

    text: str
    warn: bool = False


def _jobs(n: int) -> str:
    return f"{n} queued job{'s' if n != 1 else ''}"


def _by_team(counts: Counter[str]) -> str:
    return ", ".join(f"{team} {n}" for team, n in sorted(counts.items(), key=lambda x: -x[1]))


# ---------------------------------------------------------------------------------------------
# GPU models
# ---------------------------------------------------------------------------------------------
def _catalog(rows: list[GpuModel]) -> tuple[engine.GpuModel, ...]:
    keys = {m.pk: m.key for m in rows}
    active = [m for m in rows if m.active]
    active.sort(key=lambda m: (m.cost_factor, m.key))
    return tuple(engine_model(m, keys.get(m.shares_id, "")) for m in active)


def _queued_groups() -> list[dict[str, Any]]:
    """Queued jobs grouped by team and by what they ask for, with their number."""
    return list(
        Job.objects.filter(state=JobState.QUEUED)
        .values("team__slug", *REQUIREMENT_FIELDS, "allow_fallback")
        .annotate(n=Count("id"))
        .order_by()
    )


def _tried(group: dict[str, Any], catalog: tuple[engine.GpuModel, ...]) -> list[str]:
    """The models a group's jobs may run on, in the order tried (the first alone without
    fallback)."""
    requirement, policy = requirement_of(group)
    matched = engine.resolve_candidates(requirement, policy, catalog).matched
    keys = [m.key for m in matched]
    return keys if group["allow_fallback"] else keys[:1]


def gpu_model_clean(model: GpuModel, data: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``data`` that differ from the model, checked; an ApplicationError naming
    each bad field otherwise."""
    errors: dict[str, list[str]] = {}
    changes: dict[str, Any] = {}
    for name in GPU_MODEL_FIELDS:
        if name not in data:
            continue
        value = data[name]
        try:
            if name in ("active", "bf16", "fp8"):
                value = (
                    value if isinstance(value, bool) else str(value).lower() in ("true", "on", "1")
                )
            elif name == "cost_factor":
                value = float(value)
                if not 0.001 <= value <= 1000:
                    raise ValueError
            elif name == "fp16_tflops":
                value = float(value)
                if not 0 <= value <= 1e6:
                    raise ValueError
            elif name == "memory_gib":
                value = int(str(value).strip())
                if not 1 <= value <= 10_000:
                    raise ValueError
            elif name == "display_name":
                value = str(value).strip()
                if not 1 <= len(value) <= 128:
                    raise ValueError
            elif name == "product_labels":
                if isinstance(value, str):
                    value = [v.strip() for v in value.replace("\n", ",").split(",") if v.strip()]
                if not isinstance(value, list) or not all(
                    isinstance(v, str) and 0 < len(v) <= 253 for v in value
                ):
                    raise ValueError
        except (TypeError, ValueError):
            errors[name] = [_FIELD_RULES[name]]
            continue
        if getattr(model, name) != value:
            changes[name] = value
    if errors:
        raise ApplicationError("Invalid GPU model.", fields=errors)
    return changes


_FIELD_RULES = {
    "display_name": "Must be 1 to 128 characters.",
    "cost_factor": "Must be a number from 0.001 to 1000.",
    "fp16_tflops": "Must be a number, 0 or more.",
    "memory_gib": "Must be a whole number of GiB from 1 to 10000.",
    "product_labels": "Must be a list of label values (comma-separated on the page).",
    "active": "Must be true or false.",
    "bf16": "Must be true or false.",
    "fp8": "Must be true or false.",
}


def gpu_model_impact(model: GpuModel, changes: dict[str, Any]) -> list[Effect]:
    """What saving ``changes`` to ``model`` would affect: queued jobs that could no longer
    run on it (and those left with no model at all), jobs that would newly match it or try
    another model first, jobs already on it, its nodes, quotas and fair-share weight."""
    if not changes:
        return [Effect("Nothing changes: every field is as saved.")]
    rows = list(GpuModel.objects.all())
    before = _catalog(rows)
    after = _catalog([_with(m, changes) if m.pk == model.pk else m for m in rows])
    lost: Counter[str] = Counter()
    stranded: Counter[str] = Counter()
    gained: Counter[str] = Counter()
    reordered = 0
    for g in _queued_groups():
        was, now = _tried(g, before), _tried(g, after)
        team, n = g["team__slug"], g["n"]
        if model.key in was and model.key not in now:
            lost[team] += n
            if not now:
                stranded[team] += n
        elif model.key in now and model.key not in was:
            gained[team] += n
        if was and now and was[0] != now[0]:
            reordered += n
    effects: list[Effect] = []
    off = changes.get("active") is False
    on = changes.get("active") is True
    what = "model disabled" if off else "with these changes"
    if lost:
        total = sum(lost.values())
        effects.append(
            Effect(
                f"{what}: {_jobs(total)} can no longer run on it ({_by_team(lost)})",
                warn=True,
            )
        )
    if stranded:
        total = sum(stranded.values())
        effects.append(
            Effect(
                f"{_jobs(total)} of these would match no model at all and wait "
                f"NO_MODEL_MATCHES until changed or cancelled ({_by_team(stranded)})",
                warn=True,
            )
        )
    if gained:
        effects.append(
            Effect(
                f"{'model enabled' if on else 'with these changes'}: {_jobs(sum(gained.values()))} "
                f"could run on it that cannot now ({_by_team(gained)})"
            )
        )
    if reordered:
        effects.append(
            Effect(
                f"{_jobs(reordered)} would try another model first (the order of candidates "
                "changes)"
            )
        )
    if not (lost or gained or reordered) and any(
        k in changes for k in ("active", "memory_gib", "fp16_tflops", "bf16", "fp8", "cost_factor")
    ):
        effects.append(Effect("No queued job would run elsewhere or try another model first."))
    if off:
        holding = Job.objects.filter(gpu_model=model, state__in=HOLDING_STATES).count()
        if holding:
            effects.append(
                Effect(
                    f"{holding} job{'s' if holding != 1 else ''} admitted or running on it "
                    "go on until they end; nothing new is admitted there"
                )
            )
        nodes = Node.objects.filter(gpu_model=model).aggregate(
            n=Count("id"), gpus=Sum("gpu_allocatable")
        )
        if nodes["n"]:
            effects.append(
                Effect(
                    f"{nodes['n']} node{'s' if nodes['n'] != 1 else ''} "
                    f"({nodes['gpus'] or 0} {'GiB' if model.is_shared else 'GPUs'}) of it "
                    "take no new jobs",
                    warn=True,
                )
            )
        quotas = Quota.objects.filter(gpu_model=model, nominal__gt=0).select_related("team")
        held = [f"{q.team.slug} {q.nominal}" for q in quotas]
        if held:
            effects.append(Effect(f"nominal quota on it goes unused: {', '.join(held)}", warn=True))
    if "cost_factor" in changes:
        since = timezone.now() - dt.timedelta(days=30)
        teams = (
            UsageRecord.objects.filter(gpu_model=model, hour__gte=since)
            .values("team")
            .distinct()
            .count()
        )
        effects.append(
            Effect(
                f"fair share: each future {'GiB' if model.is_shared else 'GPU'}-hour on it "
                f"counts {changes['cost_factor']:g} instead of {model.cost_factor:g} "
                f"({teams} team{'s' if teams != 1 else ''} ran on it in the last 30 days; "
                "recorded usage keeps its weight)"
            )
        )
    if "product_labels" in changes:
        effects.append(
            Effect(
                "nodes are matched to models by their labels at the next inventory read "
                f"(every {settings.GPUPOOL_INVENTORY_INTERVAL} s)"
            )
        )
    return effects


def _with(m: GpuModel, changes: dict[str, Any]) -> GpuModel:
    copy = GpuModel(**{f.attname: getattr(m, f.attname) for f in GpuModel._meta.concrete_fields})
    for k, v in changes.items():
        setattr(copy, k, v)
    return copy


def _audit(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)[:40]
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)[:40]


@transaction.atomic
def gpu_model_update(
    *, model: GpuModel, by: Any, changes: dict[str, Any], now: dt.datetime | None = None
) -> GpuModel:
    """Save checked catalog changes (``gpu_model_clean``), one audit entry per field."""
    model = GpuModel.objects.select_for_update().get(pk=model.pk)
    now = now or timezone.now()
    audit = []
    for k, v in changes.items():
        old = getattr(model, k)
        if old == v:
            continue
        audit.append(
            QuotaChange(
                gpu_model=model,
                field=k,
                old_value=_audit(old),
                new_value=_audit(v),
                changed_by_id=by.pk,
                changed_at=now,
            )
        )
        setattr(model, k, v)
    model.save()
    QuotaChange.objects.bulk_create(audit)
    catalog_forget()
    return model


# ---------------------------------------------------------------------------------------------
# Shared pools
# ---------------------------------------------------------------------------------------------
def shared_pool_card_check(card: GpuModel) -> None:
    """Only a whole card is offered as a shared pool (not a slice, not a pool itself)."""
    if card.is_shared:
        raise ApplicationError(
            f"{card.key} is a shared pool already.", fields={"card": ["Not a whole card."]}
        )
    if mig_whole_gpu(card.key, card.resource_name):
        raise ApplicationError(
            f"{card.key} is a MIG slice; offer its card instead.",
            fields={"card": ["Not a whole card."]},
        )


def shared_pool_impact(card: GpuModel, cost_factor: float | None = None) -> list[Effect]:
    """What offering ``card`` as a shared pool would do: its unit, cost, the nodes that
    already report shared memory of the card, and what teams need before they can use it."""
    per_gib = cost_factor if cost_factor is not None else card.cost_factor / max(1, card.memory_gib)
    labels = [card.key, *(card.product_labels or [])]
    waiting = Node.objects.filter(
        gpu_model__isnull=True, gpu_product__in=[f"{label} shared" for label in labels]
    ).aggregate(n=Count("id"), gib=Sum("gpu_allocatable"), clusters=Count("cluster", distinct=True))
    effects = [
        Effect(
            f"a catalog model {card.key}-shared: jobs ask for GiB of one {card.key} device "
            f"(at most {card.memory_gib} GiB a replica); capacity and quotas count GiB"
        ),
        Effect(
            f"fair share: a GiB-hour counts {per_gib:.4g} (the card's {card.cost_factor:g} / "
            f"{card.memory_gib} GiB), so a whole device's memory for an hour costs a card-hour"
        ),
    ]
    if waiting["n"]:
        effects.append(
            Effect(
                f"{waiting['n']} node{'s' if waiting['n'] != 1 else ''} in "
                f"{waiting['clusters']} cluster{'s' if waiting['clusters'] != 1 else ''} already "
                f"report shared {card.key} memory ({waiting['gib'] or 0} GiB) and take no jobs "
                "now: they become this pool's capacity at the next inventory read"
            )
        )
    else:
        effects.append(
            Effect(
                f"no node reports shared {card.key} memory yet: the pool has no capacity until a "
                "cluster runs Volcano vGPU or HAMi on such nodes",
                warn=True,
            )
        )
    effects.append(
        Effect(
            "no team has quota on it yet: give teams GiB on the quota grid (or cohort quota) "
            "before their shares can start; whole-GPU jobs never land on it",
            warn=True,
        )
    )
    return effects


@transaction.atomic
def shared_pool_offer(
    *, card: GpuModel, by: Any, cost_factor: float | None = None, now: dt.datetime | None = None
) -> tuple[GpuModel, bool]:
    """Offer ``card`` as a shared pool (``catalog.shared_pool_create``), audited; (the pool,
    whether it was created now). A card that has one gets it back unchanged."""
    shared_pool_card_check(card)
    if cost_factor is not None and not 0.001 <= cost_factor <= 1000:
        raise ApplicationError(
            "Invalid cost factor.", fields={"cost_factor": ["Must be a number from 0.001 to 1000."]}
        )
    existing = GpuModel.objects.filter(shares=card).first()
    if existing is not None:
        return existing, False
    pool = shared_pool_create(card=card, cost_factor=cost_factor)
    QuotaChange.objects.create(
        gpu_model=card,
        field="shared_pool",
        old_value="",
        new_value=pool.key,
        changed_by_id=by.pk,
        changed_at=now or timezone.now(),
    )
    catalog_forget()
    return pool, True


# ---------------------------------------------------------------------------------------------
# Team policies
# ---------------------------------------------------------------------------------------------
def team_policy_impact(team: Team, changes: dict[str, Any]) -> tuple[list[Effect], Any]:
    """What saving ``changes`` to the team's policy would affect, and the engine's preview
    of the next cycle when the weight or cohort changes (else None)."""
    if not changes:
        return [Effect("Nothing changes: every field is as saved.")], None
    policy = TeamPolicy.objects.filter(team=team).first() or TeamPolicy(team=team)
    queued = Job.objects.filter(team=team, state=JobState.QUEUED)
    n_queued = queued.count()
    effects: list[Effect] = []
    slug = team.slug
    if changes.get("held") is True and not policy.held:
        running = Job.objects.filter(team=team, state__in=HOLDING_STATES).count()
        effects.append(
            Effect(
                f"queue held: {_jobs(n_queued)} of team {slug} would not start until it is "
                f"released; {running} admitted or running job{'s' if running != 1 else ''} go on",
                warn=bool(n_queued),
            )
        )
    if changes.get("held") is False and policy.held:
        effects.append(
            Effect(f"queue released: {_jobs(n_queued)} of team {slug} may start at the next cycle")
        )
    if "max_queued_jobs" in changes:
        limit = changes["max_queued_jobs"]
        if limit is None:
            default = settings.GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM
            effects.append(
                Effect(
                    f"no team limit of its own: the pool's default ({default or 'none'}) "
                    f"applies; team {slug} has {_jobs(n_queued)}"
                )
            )
        elif n_queued > limit:
            effects.append(
                Effect(
                    f"{_jobs(n_queued - limit)} of team {slug} would exceed the new queue limit "
                    f"({n_queued} queued, limit {limit}): they stay queued, and every submit is "
                    "refused until fewer wait",
                    warn=True,
                )
            )
        else:
            effects.append(
                Effect(
                    f"team {slug} has {_jobs(n_queued)}: {limit - n_queued} more may be "
                    "submitted under the new limit",
                    warn=limit == n_queued,
                )
            )
    if "max_queued_jobs_per_user" in changes and changes["max_queued_jobs_per_user"] is not None:
        limit = changes["max_queued_jobs_per_user"]
        over = [
            (u, n)
            for u, n in queued.values_list("owner__username")
            .annotate(n=Count("id"))
            .order_by("-n", "owner__username")
            if n > limit
        ]
        if over:
            who = ", ".join(f"{u} ({n} queued, {n - limit} over)" for u, n in over)
            effects.append(
                Effect(
                    f"{len(over)} member{'s' if len(over) != 1 else ''} of team {slug} would "
                    f"exceed the new per-member limit of {limit}: {who}; their jobs stay queued "
                    "and their submits are refused until fewer wait",
                    warn=True,
                )
            )
        else:
            effects.append(Effect(f"no member of team {slug} has more than {limit} queued jobs"))
    if "max_priority" in changes and changes["max_priority"] < policy.max_priority:
        new = changes["max_priority"]
        above = queued.filter(priority__gt=new).count()
        effects.append(
            Effect(
                f"{_jobs(above)} of team {slug} submitted above {Priority(new).label} would count "
                f"as {Priority(new).label} from the next cycle; submits above it are refused",
                warn=bool(above),
            )
        )
    if "min_runtime_minutes" in changes:
        running = Job.objects.filter(team=team, state=JobState.RUNNING).count()
        effects.append(
            Effect(
                f"the minimum runtime before preemption applies to team {slug}'s "
                f"{running} running job{'s' if running != 1 else ''} at once"
            )
        )
    if "termination_grace_seconds" in changes:
        effects.append(
            Effect(
                "the grace period applies to pods created from now on; running jobs keep "
                "the one they started with"
            )
        )
    preview = None
    if "weight" in changes or "cohort" in changes:
        cohort = changes.get("cohort", KEEP)
        if cohort is not KEEP:
            cohort = cohort.slug if cohort is not None else "default"
        preview = preview_changes(
            Proposal(
                teams=(TeamProposal(team=slug, weight=changes.get("weight", KEEP), cohort=cohort),)
            )
        )
        effects.append(
            Effect(
                f"next cycle: {len(preview.would_start)} job(s) would start (now "
                f"{preview.starts_now}), {len(preview.would_preempt)} be preempted (now "
                f"{preview.preempts_now}), {len(preview.newly_blocked)} newly blocked",
                warn=bool(preview.would_preempt or preview.newly_blocked),
            )
        )
    return effects, preview


def team_members_queued(team: Team) -> dict[str, int]:
    """Each member's queued jobs in the team (for the policy page)."""
    return dict(
        Job.objects.filter(team=team, state=JobState.QUEUED)
        .values_list("owner__username")
        .annotate(n=Count("id"))
        .order_by()
    )
