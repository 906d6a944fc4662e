"""The pool as a team sees it: ``queue`` (with start estimates), ``quota``, ``usage``, and the
catalog's GPU models (``models ls``, ``models share`` for platform admins)."""

from __future__ import annotations

from typing import Any

import click

from gpupool_cli.app import (
    _fit,
    _no_json_with_watch,
    cli,
    client,
    complete_team,
    json_option,
    watch_interval_option,
    watch_option,
    watch_or_print,
    wide_option,
)
from gpupool_cli.commands.jobs import _gpus
from gpupool_cli.output import Column, age, emit_json, short_ids, table, table_lines, when


@cli.command()
@click.option("--team", help="Only this team's queued jobs.", shell_complete=complete_team)
@click.option(
    "--sort",
    type=click.Choice(["position", "waiting", "-waiting"]),
    help="position (default), waiting, -waiting.",
)
@wide_option
@watch_option
@watch_interval_option
@json_option
def queue(
    team: str | None, sort: str | None, wide: bool, watch: bool, interval: float, as_json: bool
) -> None:
    """The queued jobs in the order the scheduler tries them, and why each waits.

    POS is the place in the whole queue; OTHERS AHEAD says how many of the jobs ahead belong
    to other teams (you do not see them, as on the web's queue page). WAITING is how long
    since the job (re)entered the queue. --wide shows the whole id, the time it was queued,
    the reason's code and every column whole.

    \b
    Example:
      gpupool queue --team vision
      gpupool queue -w --interval 5        # redraw every 5 s until Ctrl-C
    """
    _no_json_with_watch(watch, as_json)
    if as_json:
        emit_json(client().get("queue/", {"team": team, "sort": sort}))
        return

    def render() -> list[str]:
        shown = client().get("queue/", {"team": team, "sort": sort})
        ids = short_ids(str(e["id"]) for e in shown)
        columns: list[Column] = [
            ("POS", lambda e: e.get("position")),
            ("OTHERS AHEAD", lambda e: e.get("others_ahead")),
            ("ID", (lambda e: e["id"]) if wide else (lambda e: ids[str(e["id"])])),
            ("NAME", lambda e: e["name"]),
            ("TEAM", lambda e: e["team"]),
            ("OWNER", lambda e: e["owner"]),
            ("GPUS", _gpus),
            ("PRIO", lambda e: e.get("priority")),
            *(
                [("QUEUED", lambda e: when(e.get("queued_at") or e.get("submitted_at")))]
                if wide
                else [("WAITING", lambda e: age(e.get("queued_at") or e.get("submitted_at")))]
            ),
            *([("CODE", lambda e: e.get("pending_reason_code"))] if wide else []),
            ("STARTS", lambda e: _starts(e.get("start_estimate"), wide)),
            ("REASON", lambda e: e.get("pending_reason") or e.get("pending_reason_code")),
        ]
        return table_lines(shown, columns, **_fit(wide))

    watch_or_print(render, watch, interval)


def _starts(estimate: Any, wide: bool) -> str:
    """A queued job's start in a table cell: its likely range ``17:40-19:10`` (UTC; the most
    likely time is in ``show`` and ``--wide``), ``~18:05`` without a range, ``now``,
    ``unknown``, ``-`` without an estimate; --wide: the portal's whole sentence."""
    if not isinstance(estimate, dict) or not estimate.get("at"):
        return "-"
    if wide and estimate.get("summary"):
        return str(estimate["summary"])
    if estimate.get("unknown"):
        return "unknown"
    likely, early, late = (
        when(estimate.get(k))[11:16] for k in ("most_likely", "earliest", "latest")
    )
    if not estimate.get("latest"):
        return f"~{likely}"
    if early == late:
        return "now" if estimate.get("summary", "").startswith("now") else f"~{likely}"
    return f"{early}-{late}"


@cli.command()
@click.option("--team", help="Only this team.", shell_complete=complete_team)
@json_option
def quota(team: str | None, as_json: bool) -> None:
    """Your teams' GPU quotas per model: nominal, borrowing and lending limits.

    \b
    Example:
      gpupool quota --team vision
    """
    rows = [q for q in client().get("quotas/") if not team or q["team"] == team]
    if as_json:
        emit_json(rows)
        return
    table(
        rows,
        [
            ("TEAM", lambda q: q["team"]),
            ("MODEL", lambda q: q["gpu_model"]),
            ("NOMINAL", lambda q: q["nominal"]),
            ("BORROW", lambda q: q.get("borrowing_limit")),
            ("LEND", lambda q: q.get("lending_limit")),
        ],
    )


@cli.command()
@click.option(
    "--team", help="A team slug (default: each of your teams).", shell_complete=complete_team
)
@click.option(
    "--period", type=click.Choice(["day", "month"]), help="Rows per day (default) or month."
)
@click.option("--since", help="ISO 8601 or a duration ago (30d, the API's default).")
@click.option("--until", help="ISO 8601 (default now).")
@json_option
def usage(
    team: str | None, period: str | None, since: str | None, until: str | None, as_json: bool
) -> None:
    """GPU-hours (and cost) your teams used, per period, model and user.

    \b
    Example:
      gpupool usage --team vision --period month --since 90d
    """
    teams = [team] if team else [t["slug"] for t in client().get("teams/")]
    params = {"period": period, "since": since, "until": until}
    reports = [client().get(f"teams/{slug}/usage/", params) for slug in teams]
    if as_json:
        emit_json(reports if not team else reports[0])
        return
    rows = [
        {**row, "team": r["team"], "currency": r.get("currency")}
        for r in reports
        for row in r.get("rows", [])
    ]
    table(
        rows,
        [
            ("TEAM", lambda r: r["team"]),
            ("PERIOD", lambda r: r.get("period")),
            ("MODEL", lambda r: r.get("model")),
            ("USER", lambda r: r.get("user")),
            ("GPU-HOURS", lambda r: r.get("gpu_hours")),
            ("WEIGHTED", lambda r: r.get("weighted_gpu_hours")),
            ("COST", lambda r: f"{r.get('cost')} {r.get('currency') or ''}".strip()),
        ],
    )


@cli.group()
def models() -> None:
    """The GPU models of the catalog; platform admins offer a card as a shared pool."""


@models.command(name="ls")
@json_option
def models_ls(as_json: bool) -> None:
    """The catalog: each model's memory, cost factor and whether it takes new jobs.

    \b
    Example:
      gpupool models ls
    """
    rows = client().get("gpu-models/")
    if as_json:
        emit_json(rows)
        return
    table(
        rows,
        [
            ("MODEL", lambda m: m["key"]),
            ("MEMORY", lambda m: f"{m['memory_gib']} GiB"),
            ("TFLOPS", lambda m: f"{m['fp16_tflops']:g}"),
            ("COST", lambda m: f"{m['cost_factor']:g}"),
            ("ACTIVE", lambda m: "yes" if m.get("active") else "no"),
        ],
    )


@models.command(name="share")
@click.argument("card")
@click.option(
    "--cost-factor",
    type=float,
    default=None,
    help="Per GiB-hour (default: the card's cost factor / its memory in GiB).",
)
@json_option
def models_share(card: str, cost_factor: float | None, as_json: bool) -> None:
    """Offer the whole card CARD as a shared pool (platform admins): jobs then ask for GiB of
    one of its devices. Offering a card that has a pool prints that pool.

    \b
    Example:
      gpupool models share a100-80gb
      gpupool models share a100-80gb --cost-factor 0.02 --json
    """
    body = {} if cost_factor is None else {"cost_factor": cost_factor}
    pool = client().post(f"gpu-models/{card}/shared-pool/", body)
    if as_json:
        emit_json(pool)
        return
    done = "offered" if pool.get("created") else "already offered"
    click.echo(
        f"{pool['key']}  shares {pool['card']}  {done}; unit {pool['unit']}, up to "
        f"{pool['memory_gib']} GiB a replica, cost {pool['cost_factor']:g} per GiB-hour"
    )
    for line in pool.get("effects", []):
        click.echo(f"  - {line}")
