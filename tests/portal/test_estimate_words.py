"""How a start estimate's range is said: never a time in the past, "unknown" when it is."""

from __future__ import annotations

import datetime as dt

from portal.jobs.blocker import StartRange, range_words

NOW = dt.datetime(2026, 3, 3, 16, 0, tzinfo=dt.UTC)
M = dt.timedelta(minutes=1)


def test_a_range_says_between_most_likely_and_how_many_runs() -> None:
    r = StartRange(NOW + 100 * M, NOW + 190 * M, 12, False)
    assert range_words(NOW + 125 * M, r, NOW) == (
        "between 17:40 UTC and 19:10 UTC, most likely 18:05 UTC (about 9 in 10 starts fall in "
        "such a range); 12 comparable runs"
    )


def test_no_time_said_is_in_the_past() -> None:
    r = StartRange(NOW - 30 * M, NOW + 20 * M, 3, False)
    words = range_words(NOW - 10 * M, r, NOW)
    assert words.startswith("between now and 16:20 UTC, most likely now")


def test_nothing_learned_is_said_and_the_range_is_wide() -> None:
    r = StartRange(NOW, NOW + 24 * 60 * M, 0, False)
    assert "no comparable runs yet, so a wide range" in range_words(NOW + 60 * M, r, NOW)


def test_a_start_behind_a_job_that_outlived_what_was_learned_is_unknown_not_soon() -> None:
    r = StartRange(NOW, NOW + 20 * 60 * M, 12, True)
    words = range_words(NOW + 5 * M, r, NOW)
    assert words.startswith("unknown: it waits on a running job that has run longer")
    assert "soon" not in words and "12:00 UTC" in words  # tomorrow's date is named
    overdue = StartRange(NOW - 90 * M, NOW - 30 * M, 5, False)
    assert range_words(NOW - 60 * M, overdue, NOW).startswith("unknown: it is still waiting")
