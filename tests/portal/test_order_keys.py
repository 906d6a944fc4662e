"""A queue's order as sort keys (``portal.jobs.waits.order_keys``): the cycle rewrites only the
waits whose key moved, so the keys must keep every job it can and still sort the new line."""

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from portal.jobs.waits import ORDER_KEY_GAP, _longest_increasing, order_keys

G = ORDER_KEY_GAP


def test_admissions_at_the_head_change_no_one_behind():
    assert order_keys([3 * G, 4 * G, 5 * G]) == [3 * G, 4 * G, 5 * G]


def test_a_first_line_gets_keys_a_gap_apart():
    assert order_keys([None, None, None]) == [G, 2 * G, 3 * G]


def test_a_job_that_moves_up_takes_a_key_between_its_new_neighbours():
    # The line was a, b, c, d; d now goes between a and b: only d's key changes.
    keys = order_keys([1 * G, 4 * G, 2 * G, 3 * G])
    assert keys[0] == G and keys[2:] == [2 * G, 3 * G]
    assert G < keys[1] < 2 * G


def test_new_jobs_at_either_end_are_given_room():
    keys = order_keys([None, 5 * G, None])
    assert keys[1] == 5 * G and keys[0] < 5 * G < keys[2]


def test_a_gap_too_narrow_renumbers_the_line():
    assert order_keys([1, None, 2]) == [G, 2 * G, 3 * G]


@given(st.lists(st.one_of(st.none(), st.integers(-(10**12), 10**12)), max_size=60))
def test_keys_always_sort_the_new_line_and_keep_a_longest_increasing_run(previous):
    distinct = []
    seen = set()
    for v in previous:  # keys are unique in a queue
        distinct.append(None if v in seen else v)
        if v is not None:
            seen.add(v)
    keys = order_keys(distinct)
    assert len(keys) == len(distinct)
    assert all(a < b for a, b in pairwise(keys))
    kept = sum(1 for old, new in zip(distinct, keys, strict=True) if old == new)
    renumbered = keys == [(k + 1) * G for k in range(len(keys))]
    assert renumbered or kept == len(_longest_increasing(distinct))
