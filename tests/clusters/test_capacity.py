"""The one capacity rule (``rules.capacity``): free GPUs per node, over-counts shown, never
clamped away, and the same numbers on the cluster page, the dashboards and the cycle."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rules.capacity import (
    NodeLoad,
    node_free_gpus,
    planned_gpus_by_node,
    pool_capacity,
    pool_free,
)


def load(name: str, allocatable: int = 8, others: int = 0, planned: int = 0, **kw: Any) -> NodeLoad:
    return NodeLoad(
        name=name, allocatable=allocatable, used_by_others=others, planned=planned, **kw
    )


def test_free_is_allocatable_minus_others_minus_planned() -> None:
    free = node_free_gpus(load("a", 8, others=1, planned=3))
    assert (free.free, free.out_of_service, free.over) == (4, 0, 0)


def test_a_node_out_of_service_has_nothing_free_but_says_what_it_would_have() -> None:
    for kw in ({"ready": False}, {"schedulable": False}):
        free = node_free_gpus(load("a", 8, planned=2, **kw))
        assert (free.free, free.out_of_service) == (0, 6)


def test_an_over_count_is_charged_to_the_pool_not_clamped_away() -> None:
    """The issue's trial: plans say 11 on a100-0 and 5 on a100-1, the pods really run 8 and 8.
    Clamping a100-0 at zero left a100-1 "3 free" and a 17th job was admitted; the pool is
    full, and the rule must say so."""
    frees, overs = pool_free([load("a100-0", planned=11), load("a100-1", planned=5)])
    assert [f.free for f in frees] == [0, 0]
    assert len(overs) == 1
    assert (overs[0].node, overs[0].over, overs[0].charged_to) == ("a100-0", 3, (("a100-1", 3),))
    assert "11 GPUs planned" in overs[0].message and "3 too many" in overs[0].message


def test_the_excess_comes_off_the_node_with_most_free_first() -> None:
    frees, overs = pool_free(
        [load("a", planned=10), load("b", planned=6), load("c", planned=1), load("d", planned=4)]
    )
    # a is 2 over; c has 7 free, the most: it pays both.
    assert [f.free for f in frees] == [0, 2, 5, 4]
    assert overs[0].charged_to == (("c", 2),)


def test_an_excess_larger_than_the_pool_leaves_nothing_free() -> None:
    frees, overs = pool_free([load("a", planned=14), load("b", planned=6)])
    assert [f.free for f in frees] == [0, 0]
    assert overs[0].charged_to == (("b", 2),)
    assert "6 too many" in overs[0].message


def test_planned_gpus_are_keyed_by_model_so_mig_slices_are_not_taken_by_whole_gpus() -> None:
    """Issue 16's case: one node, 4 whole A100s and 7 1g.10gb slices; a 1 × 2 whole-GPU job
    takes nothing off the slices."""
    planned = planned_gpus_by_node([("east", ["mig-0"], 2, "a100-80gb")])
    whole = load("mig-0", 4, planned=planned.get(("east", "mig-0", "a100-80gb"), 0))
    slices = load("mig-0", 7, planned=planned.get(("east", "mig-0", "a100-mig-1g.10gb"), 0))
    assert node_free_gpus(whole).free == 2
    assert node_free_gpus(slices).free == 7


def test_planned_gpus_add_up_per_replica_and_skip_unbound_entries() -> None:
    planned = planned_gpus_by_node(
        [("c", ["n1", "n1", "n2"], 2, "m"), ("c", ["", "n2"], 4, "m"), ("c", None, 8, "m")]
    )
    assert planned == {("c", "n1", "m"): 4, ("c", "n2", "m"): 6}


nodes = st.lists(
    st.tuples(
        st.integers(0, 8), st.integers(0, 4), st.integers(0, 16), st.booleans(), st.booleans()
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(nodes)
def test_property_the_pool_never_offers_more_than_its_books_allow(rows: list[Any]) -> None:
    """Whatever the plans say: no node offers more than it allocates minus what is counted on
    it, and the pool's free total never exceeds allocatable − others − planned."""
    loads = [
        load(f"n{i}", a, others=o, planned=p, ready=r, schedulable=s)
        for i, (a, o, p, r, s) in enumerate(rows)
    ]
    frees, overs = pool_free(loads)
    for node, free in zip(loads, frees, strict=True):
        assert 0 <= free.free <= max(0, node.allocatable - node.used_by_others - node.planned)
        assert free.free == 0 or node.in_service
    booked = sum(max(0, n.allocatable - n.used_by_others) - n.planned for n in loads)
    assert sum(f.idle for f in frees) == max(0, booked)
    assert bool(overs) == any(
        n.planned and n.used_by_others + n.planned > n.allocatable for n in loads
    )


def test_foreign_pods_beyond_allocatable_are_no_over_count() -> None:
    """A GPU failed under pods the portal did not create: they are bound right there, so the
    node has nothing and the other nodes lose nothing."""
    frees, overs = pool_free([load("a", 7, others=8), load("b", 8)])
    assert [f.free for f in frees] == [0, 8] and overs == []
    # Portal plans on such a node cannot be there: they are charged to the pool.
    frees, overs = pool_free([load("a", 7, others=8, planned=2), load("b", 8)])
    assert [f.free for f in frees] == [0, 6] and overs[0].over == 2


def test_the_excess_goes_to_nodes_in_service_before_cordoned_ones() -> None:
    frees, overs = pool_free(
        [load("a", planned=9), load("b", planned=4), load("c", schedulable=False)]
    )
    assert [(f.free, f.out_of_service) for f in frees] == [(0, 0), (3, 0), (0, 8)]
    assert overs[0].charged_to == (("b", 1),)


@pytest.mark.parametrize("planned", [0, 8, 9])
def test_node_over_is_what_exceeds_allocatable(planned: int) -> None:
    assert node_free_gpus(load("a", 8, planned=planned)).over == max(0, planned - 8)


def test_a_pool_s_capacity_counts_every_node_row_in_service_or_not() -> None:
    """Its size, not what it can give now: a cordoned or NotReady node is still the pool's."""
    nodes = [load("a", 8, planned=8), load("b", 8, ready=False), load("c", 4, schedulable=False)]
    assert pool_capacity(n.allocatable for n in nodes) == 20
    assert sum(f.free for f in pool_free(nodes)[0]) == 0
    assert pool_capacity([]) == 0
    assert pool_capacity([8, -1]) == 8  # a row reporting less than nothing counts 0
