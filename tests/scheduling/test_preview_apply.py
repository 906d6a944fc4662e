"""Applying a proposal to a snapshot, and comparing two decisions: pure, no database."""

from __future__ import annotations

from rules.engine import ClusterState, decide
from scheduling.preview import (
    ClusterProposal,
    CohortQuotaProposal,
    Proposal,
    QuotaProposal,
    TeamProposal,
    apply_proposal,
    compare,
)
from tests.scheduling.engine.builders import a_cluster, a_job, a_snapshot, running


def snapshot():
    return (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 1, gpus=8), a_cluster("west"))
        .with_team("alice", weight=2, cohort="research")
        .with_quota("alice", "a100-80gb", 4, borrowing=2, lending=1)
        .with_cohort_quota("research", "a100-80gb", 4)
        .build()
    )


def test_fields_left_out_keep_their_value_and_null_is_a_value():
    snap = snapshot()
    after = apply_proposal(
        snap,
        Proposal(quotas=(QuotaProposal(team="alice", model="a100-80gb", borrowing_limit=None),)),
    )
    (q,) = after.quotas
    assert (q.nominal, q.borrowing_limit, q.lending_limit) == (4, None, 1)
    new = apply_proposal(snap, Proposal(quotas=(QuotaProposal(team="bob", model="t4", nominal=2),)))
    assert {(q.team, q.model, q.nominal) for q in new.quotas} == {
        ("alice", "a100-80gb", 4),
        ("bob", "t4", 2),
    }


def test_a_team_moved_to_no_cohort_joins_the_default_one_and_keeps_its_weight():
    after = apply_proposal(snapshot(), Proposal(teams=(TeamProposal(team="alice", cohort=None),)))
    (team,) = after.teams
    assert (team.cohort, team.weight) == ("default", 2)


def test_a_cohort_quota_set_to_zero_is_gone():
    after = apply_proposal(
        snapshot(),
        Proposal(
            cohort_quotas=(CohortQuotaProposal(cohort="research", model="a100-80gb", nominal=0),)
        ),
    )
    assert after.cohort_quotas == ()


def test_enabling_an_unreachable_cluster_leaves_it_unreachable():
    snap = snapshot()
    proposal = Proposal(
        clusters=(
            ClusterProposal(cluster="west", state="enabled"),
            ClusterProposal(cluster="east", state="disabled"),
        )
    )
    after = apply_proposal(snap, proposal, unreachable=frozenset({"west"}))
    states = {c.id: c.state for c in after.clusters}
    assert states == {"east": ClusterState.DISABLED, "west": ClusterState.UNREACHABLE}


def test_the_comparison_flags_only_what_the_proposal_changes():
    snap = (
        a_snapshot()
        .with_clusters(a_cluster("east").with_nodes("a100-80gb", 2, gpus=8))
        .with_quota("alice", "a100-80gb", 8)
        .with_quota("bob", "a100-80gb", 8)
        .with_running(
            running(
                "b-run",
                team="bob",
                cluster="east",
                model="a100-80gb",
                nodes=["east-a100-80gb-1"],
                gpus=8,
            )
        )
        .with_pending(a_job("a1", gpus=8), a_job("a2", team="alice", gpus=8).submitted(5))
        .build()
    )
    after = apply_proposal(
        snap,
        Proposal(
            quotas=(
                QuotaProposal(team="alice", model="a100-80gb", nominal=16),
                QuotaProposal(team="bob", model="a100-80gb", nominal=0),
            )
        ),
    )
    preview = compare(snap, after, decide(snap), decide(after))
    assert [(r.job, r.new) for r in preview.would_start] == [("a1", False)]
    assert [(r.job, r.team, r.for_team, r.new) for r in preview.would_preempt] == [
        ("b-run", "bob", "alice", True)
    ]
    assert [(t.team, t.jobs, t.gpus) for t in preview.preempted_by_team] == [("bob", 1, 8)]
    assert [(r.job, r.code, r.was) for r in preview.newly_blocked] == [
        ("a2", "PREEMPTING", "COHORT_HAS_NOTHING_TO_LEND")
    ]
    (g,) = preview.guarantees
    assert (g.nominal_now, g.nominal, g.capacity, g.over) == (16, 16, 16, 0)
    assert preview.changes_anything
