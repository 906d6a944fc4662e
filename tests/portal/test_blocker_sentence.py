"""One plain sentence per waiting job: the reason code's meaning, then the cycle's numbers,
once; the code is kept for the API and the tooltip, and the closest candidate's note is not
said again when the sentence has it."""

from __future__ import annotations

import pytest

from portal.jobs.blocker import PLAIN, blocker_sentence, job_blocker
from rules.engine.reasons import ReasonCode


def test_every_reason_code_has_plain_words():
    assert set(PLAIN) == {c.value for c in ReasonCode}


@pytest.mark.parametrize(
    ("code", "message", "said"),
    [
        (
            "QUOTA_EXHAUSTED",
            "needs 4 × a100-80gb; team quota full: 2 more than the team may use",
            "Its team's quota is in use: needs 4 × a100-80gb; team quota full: 2 more than "
            "the team may use.",
        ),
        ("TEAM_HELD", "", "An admin holds the team's queue."),
        ("", "", "Waiting for the next scheduling cycle."),
    ],
    ids=["numbers after the words", "words alone", "before any cycle"],
)
def test_the_sentence(code, message, said):
    assert blocker_sentence(code, message) == said


def test_the_closest_candidates_note_is_not_said_twice():
    detail = "no node with 4 free (largest free block 2, 2 free in enabled clusters)"
    b = job_blocker(
        code="NO_CAPACITY",
        message=f"needs 4 × a100-80gb; {detail}",
        model="a100-80gb",
        candidates=[["a100-80gb", "NO_NODE_FITS", f"a100-80gb: {detail}", "lead"]],
    )
    assert b.lead_repeats_message and b.as_dict()["sentence"].count(detail) == 1
