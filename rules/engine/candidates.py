"""Which catalog models a requirement matches, in the order a policy tries them.

Pure and cheap: the submit form calls :func:`resolve_candidates` to show, before submitting,
which models match and which the policy would try first; the engine calls it (memoised per
cycle) for every pending job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rules.engine import reasons
from rules.engine.decision import CandidateNote
from rules.engine.reasons import SkipCode
from rules.engine.snapshot import GpuModel, Policy, Requirement
from rules.jobspec import requirement_shortfalls


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidates:
    """The result of resolving a requirement against the catalog."""

    matched: tuple[GpuModel, ...]
    """Models meeting the requirement, in the order the policy tries them (first = first choice)."""
    rejected: tuple[CandidateNote, ...]
    """Models the requirement names or the catalog holds that do not qualify, with why."""


def requirement_failures(model: GpuModel, requirement: Requirement) -> list[str]:
    """The reasons ``model`` does not meet ``requirement`` (empty when it does): the match
    submit applies too (``rules.jobspec.requirement_shortfalls``), in the engine's words."""
    failures: list[str] = []
    for what, has, needs in requirement_shortfalls(
        memory_gib=model.memory_gib,
        fp16_tflops=model.tflops_fp16,
        bf16=model.bf16,
        fp8=model.fp8,
        min_memory_gib=requirement.min_memory_gib,
        min_fp16_tflops=requirement.min_tflops_fp16,
        requires_bf16=requirement.bf16,
        requires_fp8=requirement.fp8,
    ):
        if what == "memory_gib":
            failures.append(f"{reasons.fmt_num(has)} GiB < {reasons.fmt_num(needs)} GiB")
        elif what == "fp16_tflops":
            failures.append(f"{reasons.fmt_num(has)} TFLOPS < {reasons.fmt_num(needs)} TFLOPS")
        else:
            failures.append(f"no {what}")
    return failures


def _kind_note(model: GpuModel, *, shared_asked: bool) -> CandidateNote:
    return CandidateNote(
        model=model.key,
        code=SkipCode.KIND_MISMATCH,
        message=reasons.note(model.label, reasons.detail_kind_mismatch(model.kind, shared_asked)),
    )


def _shared_pool(
    requirement: Requirement, catalog: Sequence[GpuModel], by_key: dict[str, GpuModel]
) -> tuple[list[GpuModel], list[CandidateNote]]:
    """The shared pools a share may go to (the named ones, or every one), in list or catalog
    order, and a note for each named model of another kind."""
    if not requirement.models:
        return [m for m in catalog if m.shared_of], []
    pool: list[GpuModel] = []
    notes: list[CandidateNote] = []
    for key in dict.fromkeys(requirement.models):
        found = by_key.get(key)
        if found is None:
            continue
        if found.shared_of:
            pool.append(found)
        else:
            notes.append(_kind_note(found, shared_asked=True))
    return pool, notes


def _cheapest_key(m: GpuModel) -> tuple[float, float, float, str]:
    return (m.cost_factor, m.memory_gib, m.tflops_fp16, m.key)


def _fastest_key(m: GpuModel) -> tuple[float, float, str]:
    return (-m.tflops_fp16, m.cost_factor, m.key)


def resolve_candidates(
    requirement: Requirement, policy: Policy, catalog: Sequence[GpuModel]
) -> Candidates:
    """Resolve a requirement into ordered candidate models.

    Rule: a model is a candidate when it is in the explicit list (or, without a list, is a
    whole GPU: MIG slices are candidates only when named) and meets every constraint. Capacity
    kinds never mix: a requirement with ``shared`` matches shared pools only, one without it
    never matches a shared pool (``KIND_MISMATCH`` notes say so for named models).
    ``cheapest`` orders by cost factor (then memory, TFLOPS, key), so a 12 GiB inference job
    tries T4/L4 before an A100; ``fastest`` by TFLOPS descending (then cost, key);
    ``ordered`` keeps the user's list order, or catalog order without a list. A model named twice
    counts once, at its first place.
    """
    by_key = {m.key: m for m in catalog}
    rejected: list[CandidateNote] = []
    pool: list[GpuModel] = []
    if requirement.shared:
        # A share: shared pools only, named or not (a share never lands on a whole card).
        pool, kind_notes = _shared_pool(requirement, catalog, by_key)
        rejected.extend(kind_notes)
        rejected.extend(
            CandidateNote(
                model=key,
                code=SkipCode.NOT_IN_CATALOG,
                message=reasons.note(key, reasons.detail_not_in_catalog()),
            )
            for key in dict.fromkeys(requirement.models)
            if key not in by_key
        )
    elif requirement.models:
        seen: set[str] = set()
        for key in requirement.models:
            if key in seen:
                continue
            seen.add(key)
            found = by_key.get(key)
            if found is None:
                rejected.append(
                    CandidateNote(
                        model=key,
                        code=SkipCode.NOT_IN_CATALOG,
                        message=reasons.note(key, reasons.detail_not_in_catalog()),
                    )
                )
            elif found.shared_of:
                rejected.append(_kind_note(found, shared_asked=False))
            else:
                pool.append(found)
    else:
        # No list: whole GPUs only. A MIG slice has a fraction of its card's compute, and a
        # "cheapest adequate" choice must not hand one to a job that asked for GPUs.
        pool = [m for m in catalog if not m.slice_of and not m.shared_of]
        rejected.extend(
            CandidateNote(
                model=m.key,
                code=SkipCode.SLICE_NOT_NAMED,
                message=reasons.note(m.label, reasons.detail_slice_not_named(m.slice_of)),
            )
            for m in catalog
            if m.slice_of
        )
    matched: list[GpuModel] = []
    for m in pool:
        failures = requirement_failures(m, requirement)
        if failures:
            rejected.append(
                CandidateNote(
                    model=m.key,
                    code=SkipCode.REQUIREMENT_NOT_MET,
                    message=reasons.note(m.label, reasons.detail_requirement_not_met(failures)),
                )
            )
        else:
            matched.append(m)
    if policy is Policy.CHEAPEST:
        matched.sort(key=_cheapest_key)
    elif policy is Policy.FASTEST:
        matched.sort(key=_fastest_key)
    return Candidates(matched=tuple(matched), rejected=tuple(rejected))
