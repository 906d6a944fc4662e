"""Fair share: each team's standing against its weight."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from dashboards.colours import team_colour
from dashboards.live import LiveState
from dashboards.live_types import TeamInfo, TeamStanding
from dashboards.selectors.scope import TeamScope


@dataclass
class Standing:
    """A team's row on the fair-share page.

    ``fair_level`` is the dominant share equal treatment would give the team now: the
    scheduler serves the lowest dominant share ÷ weight first, so it evens those out, and at
    even the active teams' dominant shares, added up, are split by weight. None when the
    team has no work (nothing allocated or queued): it is not competing, though its past
    usage still counts against it when it submits.
    """

    team: TeamInfo
    label: str
    own: bool
    figures: TeamStanding
    quotas: list[tuple[str, int, int]]
    """(model key, nominal, allocated) for models where the team has either."""
    fair_level: float | None = None

    @property
    def colour(self) -> str:
        return team_colour(self.team.id)

    @property
    def usage_part(self) -> float:
        """The part of the dominant share that is past usage (decayed), not allocation now."""
        return max(0.0, self.figures.dominant_share - self.figures.allocation_share)

    @property
    def status(self) -> str:
        f = self.figures
        if self.fair_level is None:
            return "no work; past usage still counts" if self.usage_part > 0 else "no work"
        if f.dominant_share > self.fair_level * 1.05 + 1e-9:
            return "above fair level"
        if f.dominant_share < self.fair_level * 0.95 - 1e-9:
            return "below fair level"
        return "at fair level"


def fair_share_standings(*, scope: TeamScope, live: LiveState) -> tuple[list[Standing], int]:
    """Every visible team's standing, most entitled-to-more first (lowest weighted share), and
    how many teams were left out because they are hidden."""
    quotas: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
    for cell in live.team_cells.values():
        if cell.nominal or cell.gpus_allocated:
            quotas[cell.team_id].append(
                (live.models[cell.gpu_model_id].key, cell.nominal, cell.gpus_allocated)
            )
    active_total = sum(f.dominant_share for f in live.standings.values() if f.active)
    standings, hidden = [], 0
    for team_id, figures in live.standings.items():
        team = live.teams[team_id]
        if figures.is_empty() and team_id not in scope.own:
            continue
        if not scope.visible(team_id):
            hidden += 1
            continue
        fair = None if figures.target_share is None else figures.target_share * active_total
        standings.append(
            Standing(team, team.name, team_id in scope.own, figures, sorted(quotas[team_id]), fair)
        )
    standings.sort(key=lambda s: (s.figures.share, s.team.name))
    return standings, hidden
