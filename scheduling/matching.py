"""Before submitting: which models a requirement matches and which the policy tries first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from portal.jobs.spec import SpecError
from scheduling import engine
from scheduling.cycle import engine_catalog


def _flag(value: Any) -> bool:
    return str(value).lower() in {"1", "true", "on", "yes"}


def _number(params: Mapping[str, Any], name: str) -> float:
    raw = params.get(name)
    if raw in (None, ""):
        return 0.0
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise SpecError({name: ["Must be a number."]}) from None
    if value < 0:
        raise SpecError({name: ["Must be 0 or more."]})
    return value


def requirement_preview(params: Mapping[str, Any]) -> dict[str, Any]:
    """The engine's own candidate resolution over the active catalog (one query)."""
    raw_models = params.get("gpu_models") or ""
    keys = tuple(k.strip() for k in str(raw_models).split(",") if k.strip())
    policy_name = params.get("selection_policy") or "cheapest"
    try:
        policy = engine.Policy(policy_name)
    except ValueError:
        raise SpecError({"selection_policy": ["Must be cheapest, fastest or ordered."]}) from None
    requirement = engine.Requirement(
        models=keys,
        min_memory_gib=_number(params, "min_gpu_memory_gib"),
        min_tflops_fp16=_number(params, "min_fp16_tflops"),
        bf16=_flag(params.get("requires_bf16")),
        fp8=_flag(params.get("requires_fp8")),
    )
    catalog, _ = engine_catalog()
    result = engine.resolve_candidates(requirement, policy, catalog)
    matched = [m.key for m in result.matched]
    return {
        "matched": matched,
        "first_choice": matched[0] if matched else None,
        "rejected": [
            {"model": n.model, "code": str(n.code), "message": n.message} for n in result.rejected
        ],
    }
