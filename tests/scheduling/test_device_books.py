"""How the cycle rebuilds a shared node's per-device books (``scheduling.snapshot``).

The inventory records a shared node's GiB in all and the catalog its card's device size, but
not which device each share landed on: the snapshot charges the shares planned there to the
device the cluster's ``binpack`` scheduler gives them, oldest first.
"""

from __future__ import annotations

from scheduling.snapshot import device_books


def test_an_empty_node_is_its_devices():
    assert device_books(160, 80, 0, []) == [80, 80]


def test_planned_shares_fill_the_fullest_device_that_holds_them():
    # 50 on device 0; 20 fits device 0's 30 left (the fullest that holds it); 40 on device 1.
    assert device_books(160, 80, 0, [50, 20, 40]) == [10, 40]


def test_two_devices_with_30_left_are_not_one_with_60():
    assert device_books(160, 80, 0, [50, 50]) == [30, 30]


def test_foreign_use_is_charged_after_the_portals_shares():
    assert device_books(160, 80, 30, [50]) == [0, 80]


def test_an_over_count_never_goes_below_zero():
    assert device_books(80, 80, 0, [60, 60]) == [0]


def test_a_register_a_little_short_of_whole_gib_still_counts_its_devices():
    # 8 devices of 79.35 GiB floor to 634 GiB in all: still 8 devices, not 7.
    assert len(device_books(634, 80, 0, [])) == 8
