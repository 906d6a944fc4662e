"""Why a job waits, arranged: the closest candidate first, the others, one line for the never."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from portal.jobs.blocker import job_blocker, never_summary
from rules import engine
from rules.engine.reasons import SkipCode
from scheduling.cycle import candidate_rows
from scheduling.services import hidden_ahead


def note(model: str, code: SkipCode, detail: str) -> engine.CandidateNote:
    return engine.CandidateNote(model=model, code=code, message=f"{model}: {detail}")


NOTES = (
    note("t4", SkipCode.REQUIREMENT_NOT_MET, "does not meet the requirement (16 GiB < 40 GiB)"),
    note("a100-80gb-mig-1g.10gb", SkipCode.SLICE_NOT_NAMED, "a MIG slice of A100-80GB"),
    note("a100-80gb", SkipCode.NO_NODE_FITS, "no node with 4 free (largest free block 2, 3 free)"),
    note("h100-80gb", SkipCode.NO_ENABLED_CLUSTER, "no cluster has nodes of this model"),
    note("a100-40gb", SkipCode.QUOTA_FULL, "team quota full: team uses 8 of 8 nominal"),
    note("l40s", SkipCode.NO_ENABLED_CLUSTER, "its clusters are draining (west)"),
    note("v100-32gb", SkipCode.FALLBACK_NOT_ALLOWED, "not tried"),
)


def test_the_cycle_marks_the_closest_candidate_the_others_and_the_never():
    rows, lead = candidate_rows(NOTES, present=frozenset({"a100-80gb", "a100-40gb", "l40s"}))
    assert lead == "a100-80gb"
    assert [(r[0], r[3]) for r in rows] == [
        ("t4", "never"),
        ("a100-80gb-mig-1g.10gb", "never"),
        ("a100-80gb", "lead"),
        ("h100-80gb", "never"),  # in no cluster at all
        ("a100-40gb", "other"),
        ("l40s", "other"),  # draining: it may come back
        ("v100-32gb", "other"),
    ]


def test_a_job_no_candidate_could_ever_take_has_no_lead():
    rows, lead = candidate_rows(
        (note("t4", SkipCode.TOO_LARGE, "needs 8 GPUs per replica; the largest node has 4"),),
        present=frozenset({"t4"}),
    )
    assert lead == "" and rows[0][3] == "never"


def test_the_blocker_leads_with_the_closest_candidate_and_sums_up_the_never():
    rows, lead = candidate_rows(NOTES, present=frozenset({"a100-80gb", "a100-40gb", "l40s"}))
    b = job_blocker(
        code="NO_CAPACITY", message="needs 4 × a100-80gb; …", model=lead, candidates=rows
    )
    assert b.lead is not None and b.lead.model == "a100-80gb"
    assert b.lead.label == "a100-80gb" and b.lead.detail.startswith("no node with 4 free")
    assert [c.model for c in b.others] == ["a100-40gb", "l40s", "v100-32gb"]
    assert b.never_summary == (
        "3 models can never take it: t4 (requirement not met); a100-80gb-mig-1g.10gb "
        "(MIG slice, used only when named); h100-80gb (in no cluster)"
    )
    data = b.as_dict()
    assert data["model"] == "a100-80gb" and data["lead"]["code"] == "NO_NODE_FITS"
    assert len(data["others"]) == 3 and len(data["never"]) == 3


@pytest.mark.parametrize("stored", [[], None, [["only", "three", "items"]], [[1, 2, 3, 4]], {}])
def test_notes_stored_before_this_change_or_malformed_still_render(stored):
    b = job_blocker(code="NO_CAPACITY", message="needs 4 × t4; …", model="", candidates=stored)
    assert (b.lead, b.others, b.never, b.never_summary) == (None, (), (), "")
    assert b.as_dict()["model"] is None


def test_never_summary_of_one_model_is_singular():
    b = job_blocker(
        code="NO_MODEL_MATCHES",
        message="",
        model="",
        candidates=[["t4", "REQUIREMENT_NOT_MET", "t4: does not meet", "never"]],
    )
    assert b.never_summary == "1 model can never take it: t4 (requirement not met)"
    assert never_summary([]) == ""


@pytest.mark.parametrize(
    ("shown", "visible", "expected"),
    [
        # (pk, position, order key): keys sort the line, positions count it from 1.
        ([(1, 3, 30), (2, 5, 50)], [30, 50], {1: 2, 2: 3}),  # 3 of the 4 ahead are others'
        ([(1, 1, 7), (2, 2, 9)], [7, 9, 400], {1: 0, 2: 0}),  # nothing hidden ahead
        ([(1, None, None), (2, 4, 40)], [40], {2: 3}),  # an unranked job has nothing to explain
        ([], [], {}),
    ],
    ids=["gaps are other teams", "none hidden", "unranked skipped", "empty"],
)
def test_hidden_ahead_counts_the_jobs_ahead_the_viewer_cannot_see(shown, visible, expected):
    jobs = [SimpleNamespace(pk=pk, queue_position=p, queue_order_key=k) for pk, p, k in shown]
    assert hidden_ahead(jobs, visible) == expected
