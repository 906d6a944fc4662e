"""Before submitting: which models a requirement matches, which of them the pool has, which
the policy tries first, and which are full now.

The form's preview (``/jobs/new/match/``) and ``GET /api/v1/gpu-models/match/`` both answer
from :func:`requirement_preview`: the engine's own candidate resolution over the active
catalog, then each candidate against the clusters as the next cycle will see them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from portal.cache import ProcessView
from portal.jobs.spec import SpecError
from rules import engine
from rules.engine.capacity import Pool
from rules.jobspec import REQUIREMENT_FIELDS as REQUIREMENT_FIELDS  # read them, then requirement_of
from scheduling.inventory import Cluster, ClusterState, Node
from scheduling.snapshot import clusters_now, engine_catalog

# How long a process reuses its view of the clusters for previews (seconds): the preview
# updates as the user types, and free GPUs move with the cycle every few seconds anyway.
POOL_VIEW_SECONDS = 3.0


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


def _count(params: Mapping[str, Any], name: str) -> int:
    raw = params.get(name)
    if raw in (None, ""):
        return 1
    try:
        value = int(str(raw))
    except ValueError:
        raise SpecError({name: ["Must be a whole number."]}) from None
    if value < 1:
        raise SpecError({name: ["Must be at least 1."]})
    return value


def requirement_of(row: Mapping[str, Any]) -> tuple[engine.Requirement, engine.Policy]:
    """The engine's requirement and policy for a job's ``REQUIREMENT_FIELDS`` (a ``values()``
    row), the one reading of a stored job's requirement outside the cycle's hot loader."""
    requirement = engine.Requirement(
        models=tuple(row["gpu_models"] or ()),
        min_memory_gib=float(row["min_gpu_memory_gib"] or 0),
        min_tflops_fp16=float(row["min_fp16_tflops"] or 0),
        bf16=bool(row["requires_bf16"]),
        fp8=bool(row["requires_fp8"]),
        shared=row.get("gpu_memory_gib") is not None,
    )
    return requirement, engine.Policy(row["selection_policy"])


@dataclass(frozen=True)
class ModelRoom:
    """One GPU model across the enabled clusters, for a gang of a given size, now."""

    key: str
    clusters: tuple[str, ...]
    free_gpus: int
    largest_free_block: int
    fits_now: bool
    fits_ever: bool


_pool_view = ProcessView("pool_view", clusters_now, POOL_VIEW_SECONDS).forget_on(Cluster, Node)
"""The clusters as the next cycle will see them: an admin registering or enabling a cluster
sees it in the preview at once."""


def pool_room(*, gpus_per_replica: int, replicas: int) -> dict[str, ModelRoom]:
    """Every model some enabled cluster has, with whether the gang would fit it now."""
    pools: dict[str, list[Pool]] = {}
    for cluster in _pool_view.get():
        if cluster.state is not engine.ClusterState.ENABLED:
            continue
        by_model: dict[str, list[engine.Node]] = {}
        for node in cluster.nodes:
            by_model.setdefault(node.model, []).append(node)
        for model, nodes in by_model.items():
            pools.setdefault(model, []).append(Pool(cluster.id, cluster.state, model, nodes))
    return {
        model: ModelRoom(
            key=model,
            clusters=tuple(p.cluster for p in found),
            free_gpus=sum(p.free_total for p in found),
            largest_free_block=max(p.max_block() for p in found),
            fits_now=any(p.fits(gpus_per_replica, replicas) for p in found),
            fits_ever=any(p.could_ever_fit(gpus_per_replica, replicas) for p in found),
        )
        for model, found in pools.items()
    }


def _model_keys(params: Mapping[str, Any]) -> tuple[str, ...]:
    """The model list: comma-separated (the API), or the form's multi-select values in the
    order the user chose them (``gpu_models_order``, kept by the form's script)."""
    getlist = getattr(params, "getlist", None)
    values = [str(v) for v in getlist("gpu_models")] if getlist else [params.get("gpu_models")]
    keys = [k.strip() for v in values if v for k in str(v).split(",") if k.strip()]
    order = [k.strip() for k in str(params.get("gpu_models_order") or "").split(",") if k.strip()]
    if order and set(order) == set(keys):
        keys = order
    return tuple(dict.fromkeys(keys))


def requirement_preview(
    params: Mapping[str, Any], *, allow_fallback: bool = True
) -> dict[str, Any]:
    """What a requirement matches, in the policy's order, and how each stands in the pool.

    ``matched``/``first_choice``/``rejected`` are the catalog's answer (as before); ``pool``
    lists the matched models some enabled cluster has, in the order they are tried, each
    with whether the gang fits it now; ``absent`` the matched models no cluster has;
    ``slices_left_out`` the MIG slices a requirement without a model list does not use.
    """
    keys = _model_keys(params)
    policy_name = params.get("selection_policy") or "cheapest"
    try:
        policy = engine.Policy(policy_name)
    except ValueError:
        raise SpecError({"selection_policy": ["Must be cheapest, fastest or ordered."]}) from None
    # A share asks GiB of a shared pool's device: the pools count GiB, so that is its gang.
    share_gib = _count(params, "gpu_memory_gib") if params.get("gpu_memory_gib") else None
    requirement = engine.Requirement(
        models=keys,
        min_memory_gib=_number(params, "min_gpu_memory_gib"),
        min_tflops_fp16=_number(params, "min_fp16_tflops"),
        bf16=_flag(params.get("requires_bf16")),
        fp8=_flag(params.get("requires_fp8")),
        shared=share_gib is not None,
    )
    gpus, replicas = _count(params, "gpus_per_replica"), _count(params, "replicas")
    if share_gib is not None:
        gpus = share_gib
    catalog, _ = engine_catalog()
    result = engine.resolve_candidates(requirement, policy, catalog)
    matched = [m.key for m in result.matched]
    room = pool_room(gpus_per_replica=gpus, replicas=replicas)
    in_pool = [m for m in result.matched if m.key in room]
    # Without fallback only the policy's first choice is ever tried, present or not.
    tried = {m.key for m in in_pool} if allow_fallback else set(matched[:1])
    first_present = next((m.key for m in in_pool if m.key in tried), None)
    return {
        "matched": matched,
        "first_choice": matched[0] if matched else None,
        "rejected": [
            {"model": n.model, "code": str(n.code), "message": n.message}
            for n in result.rejected
            if n.code is not engine.SkipCode.SLICE_NOT_NAMED
        ],
        "pool": [
            {
                "model": m.key,
                "tried_first": m.key == first_present,
                "tried": m.key in tried,
                "full_now": not room[m.key].fits_now,
                "fits_ever": room[m.key].fits_ever,
                "free_gpus": room[m.key].free_gpus,
                "largest_free_block": room[m.key].largest_free_block,
                "clusters": list(room[m.key].clusters),
            }
            for m in in_pool
        ],
        "absent": [k for k in matched if k not in room],
        "slices_left_out": [
            n.model
            for n in result.rejected
            if n.code is engine.SkipCode.SLICE_NOT_NAMED and n.model in room
        ],
        "gang": {"replicas": replicas, "gpus_per_replica": gpus},
        "shared": share_gib is not None,
        "allow_fallback": allow_fallback,
        "by_model_list": bool(keys),
    }


def models_unavailable(keys: list[str]) -> dict[str, str]:
    """Why each of ``keys`` cannot be chosen now (no enabled cluster has it), in words; the
    models some enabled cluster has are left out."""
    present = set(pool_room(gpus_per_replica=1, replicas=1))
    elsewhere: dict[str, set[str]] = {}
    for key, state, unreachable_since in (
        Node.objects.filter(gpu_model__key__in=[k for k in keys if k not in present])
        .values_list("gpu_model__key", "cluster__state", "cluster__unreachable_since")
        .distinct()
    ):
        if state == ClusterState.ENABLED and unreachable_since is not None:
            state = "unreachable"  # as the cycle sees it: takes nothing new for now
        elsewhere.setdefault(key, set()).add(state)
    reasons = {}
    for key in keys:
        if key in present:
            continue
        states = elsewhere.get(key)
        if states and ClusterState.ENABLED in states:
            reasons[key] = "its nodes have no GPUs to allocate"
        elif states and "unreachable" in states:
            reasons[key] = "only on a cluster that cannot be reached now"
        elif states and ClusterState.DRAINING in states:
            reasons[key] = "only on a draining cluster"
        elif states:
            reasons[key] = "only on a disabled cluster"
        else:
            reasons[key] = "no cluster has it"
    return reasons
