"""Series colours shared by every chart and table, so a team looks the same everywhere."""

from __future__ import annotations

import zlib

# Colour-blind-safe hues (Okabe-Ito, then Paul Tol's muted set), each dark enough to read as a
# line on white; grey is kept for "Other teams" and near-black for the peak line.
PALETTE = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#332288",
    "#117733",
    "#882255",
    "#44AA99",
    "#999933",
    "#AA4499",
    "#56B4E9",
    "#CC6677",
    "#8C6D1F",
)
OTHER_COLOUR = "#8A919C"
PEAK_COLOUR = "#1D2330"


def team_colour(team_id: int) -> str:
    """A team's colour on every chart: from its id, so it never changes with the ranking, the
    page or the load. Ids are handed out in order, so up to ``len(PALETTE)`` teams never share
    one; beyond that the legend's names (and line dashes) still tell them apart."""
    return PALETTE[team_id % len(PALETTE)]


def key_colour(key: str) -> str:
    """A colour for a named series (a GPU model), stable across pages and loads."""
    return PALETTE[zlib.crc32(key.encode()) % len(PALETTE)]
