"""How the books hold a shared node's devices (``rules.capacity.device_books``).

With the inventory's devices (UUID, GiB, GiB foreign pods hold there), each share is charged to
the device its plan names: planned by the cycle, then as the cluster's scheduler reported it.
What is not known (an older job without a device plan, foreign GiB no pod placed on a device)
goes where the cluster's ``binpack`` scheduler would put it, oldest first; without the
inventory's devices, the node is ``allocatable / device size`` equal devices.
"""

from __future__ import annotations

from rules.capacity import device_books

A, B = "GPU-a", "GPU-b"
TWO = [{"id": A, "gib": 80, "others": 0}, {"id": B, "gib": 80, "others": 0}]


def free(*args, **kwargs) -> list[int]:
    return device_books(*args, **kwargs)[0]


def test_an_empty_node_is_its_devices():
    assert free(160, 80, 0, []) == [80, 80]
    assert device_books(160, 80, 0, [], TWO) == ([80, 80], (A, B), [])


def test_planned_shares_fill_the_fullest_device_that_holds_them():
    # 50 on device 0; 20 fits device 0's 30 left (the fullest that holds it); 40 on device 1.
    assert free(160, 80, 0, [(50, ""), (20, ""), (40, "")]) == [10, 40]


def test_two_devices_with_30_left_are_not_one_with_60():
    assert free(160, 80, 0, [(50, ""), (50, "")]) == [30, 30]


def test_foreign_use_is_charged_after_the_portals_shares():
    assert free(160, 80, 30, [(50, "")]) == [0, 80]


def test_an_over_count_never_goes_below_zero():
    assert free(80, 80, 0, [(60, ""), (60, "")]) == [0]


def test_a_register_a_little_short_of_whole_gib_still_counts_its_devices():
    # 8 devices of 79.35 GiB floor to 634 GiB in all: still 8 devices, not 7.
    assert len(free(634, 80, 0, [])) == 8


def test_a_share_is_charged_to_the_device_its_plan_names_not_where_binpack_would_put_it():
    # Binpack would stack both 30 GiB shares on device A; the plans put one on each.
    assert free(160, 80, 0, [(30, A), (30, B)], TWO) == [50, 50]


def test_foreign_gib_the_inventory_placed_stays_on_its_device():
    devices = [{"id": A, "gib": 80, "others": 0}, {"id": B, "gib": 80, "others": 70}]
    assert free(160, 80, 70, [(30, A)], devices) == [50, 10]


def test_a_share_of_unknown_device_goes_where_binpack_would_put_it():
    assert free(160, 80, 0, [(50, B), (20, "")], TWO) == [80, 10]


def test_a_device_the_node_no_longer_has_is_charged_as_unknown():
    assert free(160, 80, 0, [(50, "GPU-gone")], TWO) == [30, 80]


def test_compute_is_booked_on_the_device_a_share_holds_where_the_node_registered_it():
    devices = [
        {"id": A, "gib": 80, "cores": 100, "others": 10, "others_cores": 20},
        {"id": B, "gib": 80, "cores": 100},
    ]
    books = device_books(160, 80, 10, [(20, B, 60), (10, "", 30)], devices)
    # A: 70 GiB and 80 % left after the foreign pod; B: 60 GiB and 40 % after its share. The
    # share of unknown device goes where binpack puts it, the fuller B, compute and all.
    assert books.free == [70, 50]
    assert books.cores == [80, 10]
