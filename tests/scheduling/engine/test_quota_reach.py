"""``quota_reach``: the most GPUs the engine could give a team, the rule the Volcano queue sync
shares with the engine. Each case is checked against ``decide`` too: with room to spare, the
team is admitted exactly its reach and not one GPU more."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rules.engine import CohortQuota, Quota, decide, quota_reach
from rules.engine.quota import QuotaBook
from tests.scheduling.engine.builders import a_cluster, a_job, a_snapshot, admitted

A100 = "a100-80gb"


@dataclass
class Case:
    id: str
    teams: dict[str, str]
    quotas: list[Quota]
    cohort_quotas: list[CohortQuota]
    want: dict[tuple[str, str], int]


def q(team: str, nominal: int, borrowing: int | None = None, lending: int | None = None) -> Quota:
    return Quota(
        team=team, model=A100, nominal=nominal, borrowing_limit=borrowing, lending_limit=lending
    )


CASES = [
    Case("nominal alone", {"a": "c"}, [q("a", 8)], [], {("a", A100): 8}),
    Case(
        "a team without a row borrows what its cohort lends",
        {"a": "c", "b": "c"},
        [q("a", 8)],
        [],
        {("a", A100): 8, ("b", A100): 8},
    ),
    Case(
        "a team without a row in another cohort reaches nothing",
        {"a": "c", "b": "other"},
        [q("a", 8)],
        [],
        {("a", A100): 8},
    ),
    Case(
        "the borrowing limit caps the reach",
        {"a": "c", "b": "c"},
        [q("a", 8), q("b", 2, borrowing=3)],
        [],
        {("a", A100): 10, ("b", A100): 5},
    ),
    Case(
        "a lending limit caps what others may borrow",
        {"a": "c", "b": "c"},
        [q("a", 8, lending=3)],
        [],
        {("a", A100): 8, ("b", A100): 3},
    ),
    Case(
        "cohort-owned quota is borrowable by every member, with or without a row",
        {"a": "c", "b": "c"},
        [q("a", 4)],
        [CohortQuota(cohort="c", model=A100, nominal=6)],
        {("a", A100): 10, ("b", A100): 10},
    ),
    Case(
        "nominal 0 and borrowing 0 forbid the model",
        {"a": "c", "b": "c"},
        [q("a", 8), q("b", 0, borrowing=0)],
        [],
        {("a", A100): 8},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_quota_reach(case: Case) -> None:
    assert quota_reach(teams=case.teams, quotas=case.quotas, cohort_quotas=case.cohort_quotas) == (
        case.want
    )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_engine_admits_exactly_the_reach(case: Case) -> None:
    for team in case.teams:
        reach = case.want.get((team, A100), 0)
        for gpus, fits in ((reach, reach > 0), (reach + 1, False)):
            snap = a_snapshot().with_clusters(a_cluster().with_nodes(A100, 1, gpus=64))
            for t, cohort in case.teams.items():
                snap = snap.with_team(t, cohort=cohort)
            for row in case.quotas:
                snap = snap.with_quota(
                    row.team,
                    row.model,
                    row.nominal,
                    borrowing=row.borrowing_limit,
                    lending=row.lending_limit,
                )
            for cq in case.cohort_quotas:
                snap = snap.with_cohort_quota(cq.cohort, cq.model, cq.nominal)
            snap = snap.with_pending(a_job("j", team=team, gpus=max(1, gpus)).on_models(A100))
            got = "j" in admitted(decide(snap.build()))
            assert got is (fits and gpus >= 1), (team, gpus)


_rows = st.lists(
    st.tuples(
        st.sampled_from("abc"),
        st.integers(0, 12),
        st.one_of(st.none(), st.integers(0, 8)),
        st.one_of(st.none(), st.integers(0, 8)),
    ),
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(
    rows=_rows,
    cohort_own=st.integers(0, 6),
    use=st.lists(st.tuples(st.sampled_from("abc"), st.integers(-4, 16)), max_size=5),
    held=st.integers(0, 4),
)
def test_the_most_a_team_fits_is_the_largest_size_fits_takes(
    rows: list[tuple[str, int, int | None, int | None]],
    cohort_own: int,
    use: list[tuple[str, int]],
    held: int,
) -> None:
    """``QuotaBook.most`` (what the forecast's steps read once per team and model) answers
    every size as ``fits`` does, whatever the quotas, use, lending and holds."""
    book = QuotaBook(
        {"a": "c", "b": "c", "c": "other"},
        tuple(
            Quota(team=t, model=A100, nominal=n, borrowing_limit=b, lending_limit=lend)
            for t, n, b, lend in rows
        ),
        (CohortQuota(cohort="c", model=A100, nominal=cohort_own),),
    )
    for team, gpus in use:
        book.add(team, A100, gpus)
    if held:
        book.hold("a", A100, held)
    for team in "abcd":
        most = book.most(team, A100)
        for n in range(1, 40):
            assert (book.fits(team, A100, n) >= 0) is (n <= most), (team, n, most)
