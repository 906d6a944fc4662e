"""Which models a requirement matches and in which order each policy tries them."""

from __future__ import annotations

import pytest

from rules.engine import GpuModel, Policy, Requirement, SkipCode, resolve_candidates
from tests.scheduling.engine.builders import CATALOG

CASES = [
    # (id, requirement, policy, expected order, expected rejected keys)
    (
        "12 GiB inference tries T4 then L4 before any A100 (cheapest)",
        Requirement(min_memory_gib=12),
        Policy.CHEAPEST,
        ["t4", "l4", "v100-32gb", "a100-80gb", "h100-80gb"],
        [],
    ),
    (
        "24 GiB excludes T4 and says why",
        Requirement(min_memory_gib=24),
        Policy.CHEAPEST,
        ["l4", "v100-32gb", "a100-80gb", "h100-80gb"],
        ["t4"],
    ),
    (
        "fastest puts H100 first",
        Requirement(),
        Policy.FASTEST,
        ["h100-80gb", "a100-80gb", "v100-32gb", "l4", "t4"],
        [],
    ),
    (
        "bf16 keeps only models that compute in bf16",
        Requirement(bf16=True),
        Policy.CHEAPEST,
        ["l4", "a100-80gb", "h100-80gb"],
        ["t4", "v100-32gb"],
    ),
    (
        "fp8 with 40 GiB leaves H100 alone",
        Requirement(fp8=True, min_memory_gib=40),
        Policy.CHEAPEST,
        ["h100-80gb"],
        ["t4", "l4", "v100-32gb", "a100-80gb"],
    ),
    (
        "min TFLOPS 300 keeps A100 and H100",
        Requirement(min_tflops_fp16=300),
        Policy.CHEAPEST,
        ["a100-80gb", "h100-80gb"],
        ["t4", "l4", "v100-32gb"],
    ),
    (
        "ordered keeps the user's order",
        Requirement(models=("a100-80gb", "t4", "v100-32gb")),
        Policy.ORDERED,
        ["a100-80gb", "t4", "v100-32gb"],
        [],
    ),
    (
        "cheapest reorders an explicit list",
        Requirement(models=("a100-80gb", "t4")),
        Policy.CHEAPEST,
        ["t4", "a100-80gb"],
        [],
    ),
    (
        "an unknown model in the list is rejected, not fatal",
        Requirement(models=("mi300x", "l4")),
        Policy.ORDERED,
        ["l4"],
        ["mi300x"],
    ),
    (
        "constraints still apply to an explicit list",
        Requirement(models=("t4", "a100-80gb"), min_memory_gib=24),
        Policy.ORDERED,
        ["a100-80gb"],
        ["t4"],
    ),
    (
        "ordered without a list follows the catalog",
        Requirement(),
        Policy.ORDERED,
        ["t4", "l4", "v100-32gb", "a100-80gb", "h100-80gb"],
        [],
    ),
    (
        "a requirement nothing meets matches nothing",
        Requirement(min_memory_gib=200),
        Policy.CHEAPEST,
        [],
        ["t4", "l4", "v100-32gb", "a100-80gb", "h100-80gb"],
    ),
]


@pytest.mark.parametrize(
    ("requirement", "policy", "order", "rejected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_resolve_candidates(
    requirement: Requirement, policy: Policy, order: list[str], rejected: list[str]
) -> None:
    got = resolve_candidates(requirement, policy, CATALOG)
    assert [m.key for m in got.matched] == order
    assert [n.model for n in got.rejected] == rejected


def test_rejection_message_names_the_numbers() -> None:
    got = resolve_candidates(Requirement(min_memory_gib=24), Policy.CHEAPEST, CATALOG)
    (t4,) = got.rejected
    assert t4.code is SkipCode.REQUIREMENT_NOT_MET
    assert t4.message == "T4: does not meet the requirement (16 GiB < 24 GiB)"


def test_unknown_model_message() -> None:
    got = resolve_candidates(Requirement(models=("mi300x",)), Policy.ORDERED, CATALOG)
    assert got.rejected[0].code is SkipCode.NOT_IN_CATALOG
    assert got.rejected[0].message == "mi300x: not in the catalog"


# A MIG slice of the A100: a seventh of its compute, at a seventh of its cost (cheaper than T4).
SLICE = GpuModel(
    key="a100-80gb-mig-1g.10gb",
    name="A100 MIG 1g.10gb",
    cost_factor=0.14,
    tflops_fp16=44.6,
    memory_gib=10,
    bf16=True,
    slice_of="a100-80gb",
)
WITH_SLICE = (SLICE, *CATALOG)

MIG_CASES = [
    (
        "a whole-GPU requirement never leads with a cheaper MIG slice",
        Requirement(min_memory_gib=8),
        Policy.CHEAPEST,
        ["t4", "l4", "v100-32gb", "a100-80gb", "h100-80gb"],
    ),
    (
        "nor does 'any model'",
        Requirement(),
        Policy.CHEAPEST,
        ["t4", "l4", "v100-32gb", "a100-80gb", "h100-80gb"],
    ),
    (
        "a slice named in the list is a candidate like any model",
        Requirement(models=("a100-80gb-mig-1g.10gb", "t4")),
        Policy.CHEAPEST,
        ["a100-80gb-mig-1g.10gb", "t4"],
    ),
]


@pytest.mark.parametrize(
    ("requirement", "policy", "order"),
    [c[1:] for c in MIG_CASES],
    ids=[c[0] for c in MIG_CASES],
)
def test_mig_slices_only_when_named(
    requirement: Requirement, policy: Policy, order: list[str]
) -> None:
    got = resolve_candidates(requirement, policy, WITH_SLICE)
    assert [m.key for m in got.matched] == order


def test_a_slice_left_out_says_why() -> None:
    got = resolve_candidates(Requirement(), Policy.CHEAPEST, WITH_SLICE)
    (note,) = got.rejected
    assert note.code is SkipCode.SLICE_NOT_NAMED
    assert note.message == (
        "A100 MIG 1g.10gb: a MIG slice of a100-80gb, used only when the model list names it"
    )
