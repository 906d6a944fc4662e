"""Refusing at submit a job its team's quota can never admit.

A job asking 64 GPUs of a team whose quota reaches 24 on every model it may run on would wait
forever: no cycle can admit it, whatever ends. Telling the user at once, with the limit and
the ways out, beats a queue entry that only says "quota" every cycle.

The bound is the engine's own (:func:`rules.engine.quota_reach`): the team's nominal plus
the most its cohort could lend it, within its borrowing limit, as the quotas stand now. A team
whose quota reaches nothing at all on the job's models is *not* refused: that is a pool still
being set up (quotas not granted yet), and its jobs wait with the engine's reason naming it.

The quota lines and the catalog are read once per :data:`CACHE_SECONDS` per process (and again
at once when a quota, cohort quota, policy, team or model is saved here), so a submit pays no
query for this; inside a transaction they are read fresh, as the other submit-time caches do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from portal.cache import ProcessView
from portal.jobs.spec import JobSpec, SpecError
from portal.models import Team
from rules import engine
from scheduling.matching import REQUIREMENT_FIELDS, requirement_of
from scheduling.models import CohortQuota, GpuModel, Quota, TeamPolicy
from scheduling.snapshot import engine_catalog, quota_lines

__all__ = ["CACHE_SECONDS", "quota_refusal", "quota_refusals"]

CACHE_SECONDS = 10.0


@dataclass(frozen=True)
class _View:
    catalog: tuple[engine.GpuModel, ...]
    reach: dict[tuple[str, str], int]
    tried: dict[tuple[Any, ...], list[str]] = field(default_factory=dict)
    """:func:`_tried` by requirement: most submits ask alike, and resolving the catalog costs
    more than the rest of the check."""


def _read() -> _View:
    teams, quotas, cohort_quotas = quota_lines()
    reach = engine.quota_reach(
        teams={t.id: t.cohort for t in teams}, quotas=quotas, cohort_quotas=cohort_quotas
    )
    return _View(catalog=engine_catalog()[0], reach=reach)


_quota_view = ProcessView("quota_view", _read, CACHE_SECONDS).forget_on(
    Quota, CohortQuota, TeamPolicy, Team, GpuModel
)
"""A quota edited here applies to the next submit at once."""


def _tried(spec: JobSpec, view: _View) -> list[str]:
    """The models the engine may try for ``spec``, in its order (only the first without
    fallback), as the cycle resolves them."""
    key = (
        spec.gpu_models,
        spec.min_gpu_memory_gib,
        spec.min_fp16_tflops,
        spec.requires_bf16,
        spec.requires_fp8,
        spec.gpu_memory_gib is not None,
        spec.selection_policy,
        spec.allow_fallback,
    )
    found = view.tried.get(key)
    if found is None:
        if len(view.tried) > 1000:
            view.tried.clear()
        found = view.tried[key] = _resolve(spec, view.catalog)
    return found


def _resolve(spec: JobSpec, catalog: tuple[engine.GpuModel, ...]) -> list[str]:
    requirement, policy = requirement_of({f: getattr(spec, f) for f in REQUIREMENT_FIELDS})
    keys = [m.key for m in engine.resolve_candidates(requirement, policy, catalog).matched]
    return keys if spec.allow_fallback else keys[:1]


def _amount(n: int, shared: bool) -> str:
    if shared:
        return f"{n} GiB"
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def quota_refusal(spec: JobSpec, team: Team, view: _View | None = None) -> SpecError | None:
    """Why ``spec`` can never start under ``team``'s quota, or None when it may."""
    view = view or _quota_view.get()
    message = _beyond(
        view,
        team,
        _tried(spec, view),
        replicas=spec.replicas,
        per_replica=spec.gpus_per_replica,
        shared=spec.gpu_memory_gib is not None,
    )
    if message is None:
        return None
    return SpecError({"replicas" if spec.replicas > 1 else "gpus_per_replica": [message]})


def beyond_quota_message(
    team: Team, tried: Sequence[str], *, replicas: int, per_replica: int, shared: bool
) -> str | None:
    """The words of a refusal (the submit's, and the form's warning before it): the job's
    size, the team's reach on each model it may try, and the ways out; None when the quota
    can take it on one of them (or reaches none of them at all: see the module docstring)."""
    return _beyond(
        _quota_view.get(), team, tried, replicas=replicas, per_replica=per_replica, shared=shared
    )


def _beyond(
    view: _View, team: Team, tried: Sequence[str], *, replicas: int, per_replica: int, shared: bool
) -> str | None:
    reach = {key: view.reach.get((team.slug, key), 0) for key in tried}
    need = replicas * per_replica
    if not reach or max(reach.values()) <= 0 or need <= max(reach.values()):
        return None
    size = f"{replicas} × {_amount(per_replica, shared)}" if replicas > 1 else ""
    best_key = max(reach, key=lambda k: (reach[k], -list(reach).index(k)))
    limits = ", ".join(f"{key} {_amount(n, shared)}" for key, n in reach.items())
    smaller = "fewer replicas or less GPU memory each" if shared else "fewer replicas or GPUs each"
    return (
        f"This job needs {_amount(need, shared)} at once{f' ({size})' if size else ''}, more "
        f"than team {team.name}'s quota can ever give it on the models it may run on "
        f"({limits}: the nominal quota plus the most the cohort could lend, within the "
        "borrowing limit), so it would wait forever. Ways out: "
        f"{smaller} (at most {_amount(reach[best_key], shared)} on {best_key}), other models, "
        "or ask a team admin to raise the quota."
    )


def quota_refusals(specs: Sequence[tuple[JobSpec, Team]]) -> dict[int, SpecError]:
    """:func:`quota_refusal` of each (spec, team), by index, for the ones refused."""
    found = {}
    view = _quota_view.get()
    for i, (spec, team) in enumerate(specs):
        refusal = quota_refusal(spec, team, view)
        if refusal is not None:
            found[i] = refusal
    return found
