"""Reading and ending jobs: ``ls`` (filtered, fitted to the terminal, --watch), ``show``,
``cancel`` and ``events``."""

from __future__ import annotations

import shlex
from typing import Any

import click

from gpupool_cli.api import ApiError
from gpupool_cli.app import (
    JOB_STATES,
    _fit,
    _no_json_with_watch,
    cli,
    client,
    complete_job,
    complete_team,
    job_ref,
    json_option,
    watch_interval_option,
    watch_option,
    watch_or_print,
    wide_option,
)
from gpupool_cli.output import (
    WIDTH,
    Column,
    age,
    emit_json,
    error_print,
    pairs,
    short_ids,
    table,
    table_lines,
    when,
)


def _in_all(job: dict[str, Any]) -> str:
    """A job's whole ask in its unit: "8" GPUs, or "40 GiB" of a shared pool."""
    total = job.get("total_gpus")
    return f"{total} GiB" if job.get("gpu_memory_gib") is not None else str(total)


def _gpus(job: dict[str, Any]) -> str:
    if job.get("gpu_memory_gib") is not None:  # a share of one device per replica
        return f"{job.get('replicas')}x{job['gpu_memory_gib']}GiB"
    return f"{job.get('replicas')}x{job.get('gpus_per_replica')}"


def _reason(job: dict[str, Any]) -> str:
    """Why the job is where it is, in words: a queued job's place in line and what it waits
    for, what stopped a RESTARTING job's pods (the API's status_reason)."""
    reason = job.get("status_reason") or (
        job.get("pending_reason") if job.get("state") == "QUEUED" else ""
    )
    position = job.get("position")
    return f"#{position} {reason}".strip() if position else reason or ""


def job_columns(jobs: list[dict[str, Any]], wide: bool) -> list[Column]:
    """``ls``'s columns: in 100 columns a short id (enough of it to tell the jobs apart, which
    every command takes) and the age; --wide the whole id, the time and the cluster."""
    ids = short_ids(str(j["id"]) for j in jobs)
    return [
        ("ID", (lambda j: j["id"]) if wide else (lambda j: ids[str(j["id"])])),
        ("NAME", lambda j: j["name"]),
        ("TEAM", lambda j: j["team"]),
        ("OWNER", lambda j: j["owner"]),
        # What the job does now, as the job page shows it: RESTARTING is a RUNNING job whose
        # pods wait to be placed again (an older portal sends no status: its state then).
        ("STATE", lambda j: j.get("status") or j["state"]),
        ("GPUS", _gpus),
        ("MODEL", lambda j: j.get("gpu_model")),
        *(
            [
                ("CLUSTER", lambda j: j.get("cluster")),
                ("SUBMITTED", lambda j: when(j.get("submitted_at"))),
            ]
            if wide
            else [("AGE", lambda j: age(j.get("submitted_at")))]
        ),
        ("REASON", _reason),
    ]


@cli.command(name="ls")
@click.option("--team", help="Only this team's jobs (slug).", shell_complete=complete_team)
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(JOB_STATES, case_sensitive=False),
    help="Only jobs in this state (repeatable); a RESTARTING job is RUNNING.",
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([*JOB_STATES, "RESTARTING"], case_sensitive=False),
    help="Only jobs whose STATE column shows this (repeatable): RESTARTING, or RUNNING for "
    "those running now.",
)
@click.option("--kind", type=click.Choice(["training", "inference"]), help="Only this kind.")
@click.option("--mine", is_flag=True, help="Only my own jobs.")
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="At most this many, newest first.",
)
@wide_option
@watch_option
@watch_interval_option
@json_option
def list_jobs(
    team: str | None,
    states: tuple[str, ...],
    statuses: tuple[str, ...],
    kind: str | None,
    mine: bool,
    limit: int,
    wide: bool,
    watch: bool,
    interval: float,
    as_json: bool,
) -> None:
    """List your teams' jobs, newest first (GET /api/v1/jobs/ and its filters).

    The table fits 100 columns: the ID column shows enough of each id to tell the jobs apart
    (every command takes it), long names and reasons end in an ellipsis; --wide shows every
    column whole, the full id, the submit time and the cluster. REASON is why a queued job
    waits (#N: its place in line) or what stopped a RESTARTING job's pods.

    \b
    Example:
      gpupool ls --mine --state QUEUED --state RUNNING
      gpupool ls --status RESTARTING --wide
      gpupool ls --mine -w                 # redraw every 2 s until Ctrl-C
      gpupool ls --team vision --json | jq -r '.[].id'
    """
    _no_json_with_watch(watch, as_json)
    params: dict[str, Any] = {
        "team": team,
        "state": [s.upper() for s in states],
        "status": [s.upper() for s in statuses],
        "kind": kind,
        "mine": "true" if mine else None,
        "page_size": min(limit, 500),
    }

    def fetch() -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = []
        page = client().get("jobs/", params)
        while True:
            jobs.extend(page["results"])
            if len(jobs) >= limit or not page.get("next"):
                break
            cursor = _cursor(page["next"])
            page = client().get("jobs/", {**params, "cursor": cursor})
        return jobs[:limit]

    if as_json:
        emit_json(fetch())
        return

    def render() -> list[str]:
        jobs = fetch()
        return table_lines(jobs, job_columns(jobs, wide), **_fit(wide))

    watch_or_print(render, watch, interval)


def _cursor(next_url: str) -> str:
    from urllib.parse import parse_qs, urlparse

    return parse_qs(urlparse(next_url).query).get("cursor", [""])[0]


@cli.command()
@click.argument("job_id", metavar="JOB", shell_complete=complete_job)
@json_option
def show(job_id: str, as_json: bool) -> None:
    """One job: its request, state, placement, and why it waits.

    JOB is a job's id, its name (your newest job so named) or 6+ characters of its id.

    \b
    Example:
      gpupool show resnet50
      gpupool show 3f9c2f --json | jq .state
    """
    job = client().get(f"jobs/{job_ref(job_id)}/")
    if as_json:
        emit_json(job)
        return
    blocker = job.get("blocker") or {}
    estimate = job.get("start_estimate") or {}
    items: list[tuple[str, Any]] = [
        ("id", job["id"]),
        ("name", job["name"]),
        ("team", job["team"]),
        ("owner", job["owner"]),
        ("state", job.get("status") or job["state"]),
        ("kind", job.get("kind")),
        ("image", job.get("image")),
        ("command", shlex.join(job.get("command") or []) or None),
        ("args", shlex.join(job.get("args") or []) or None),
        ("gpus", f"{_gpus(job)} ({_in_all(job)} in all)"),
        ("gpu models", job.get("gpu_models")),
        ("min gpu memory", job.get("min_gpu_memory_gib")),
        ("priority", job.get("priority")),
        ("max runtime (min)", job.get("max_runtime_minutes")),
        ("cluster", job.get("cluster")),
        ("gpu model", job.get("gpu_model")),
        ("submitted", when(job.get("submitted_at"))),
        ("started", when(job.get("started_at"))),
        ("finished", when(job.get("finished_at"))),
    ]
    if job.get("position"):
        hidden = job.get("others_ahead")
        tail = f" ({hidden} job{'s' if hidden != 1 else ''} of other teams ahead)" if hidden else ""
        items.append(("position", f"{job['position']}{tail}"))
    # A waiting job's blocker is said once, in the portal's plain sentence (its code is in
    # --json); another state's reason (what stopped a RESTARTING job's pods) as it is.
    if isinstance(blocker, dict) and blocker.get("sentence"):
        items.append(("waiting", blocker["sentence"]))
    elif job.get("status_reason") or job.get("pending_reason"):
        items.append(("reason", job.get("status_reason") or job["pending_reason"]))
    if isinstance(estimate, dict) and estimate.get("source"):
        at = when(estimate.get("at")) if estimate.get("at") else "no estimate"
        items.append(("start estimate", estimate.get("summary") or at))
        if estimate.get("model"):
            items.append(("would start on", f"{estimate['model']} in {estimate.get('cluster')}"))
        items.append(("estimate basis", estimate.get("basis") or estimate["source"]))
    if job.get("preemption_count"):
        items.append(("preempted", job["preemption_count"]))
    if job.get("cancel_reason"):
        items.append(("cancel reason", job["cancel_reason"]))
    pairs(items)


@cli.command()
@click.argument("job_ids", metavar="JOB...", nargs=-1, required=True, shell_complete=complete_job)
@click.option("--reason", default="", help="Why; the job's owner reads it.")
@json_option
def cancel(job_ids: tuple[str, ...], reason: str, as_json: bool) -> None:
    """Cancel a job, or several with one reason (a finished one is refused: exit 4).

    Each JOB is a job's id, its name (your newest job so named) or 6+ characters of its id.
    With several, each is cancelled in turn; one refused is said on stderr and the others
    go on (the exit code is the last refusal's). A team admin cancels their team's jobs
    this way; another team's job is "no job of your teams" (exit 3).

    \b
    Example:
      gpupool cancel resnet50 --reason "wrong learning rate"
      gpupool cancel 3f9c2f1e
      gpupool cancel 3f9c2f1e 8a1b2c3d bert-7 --reason "maintenance tonight"
      gpupool cancel $(gpupool ls --team vision --state QUEUED --json | jq -r '.[].id')
    """
    body = {"reason": reason} if reason else {}
    if len(job_ids) == 1:  # one job: its object, and a refusal is the command's
        job = client().post(f"jobs/{job_ref(job_ids[0])}/cancel/", body)
        if as_json:
            emit_json(job)
        else:
            click.echo(f"{job['id']}  {job['state']}")
        return
    done: list[Any] = []
    refused = 0
    for ref in job_ids:
        try:
            job = client().post(f"jobs/{job_ref(ref)}/cancel/", body)
        except ApiError as error:
            click.echo(f"{ref}: ", err=True, nl=False)
            error_print(error)
            refused = error.exit_code
            continue
        done.append(job)
        if not as_json:
            click.echo(f"{job['id']}  {job['state']}")
    if as_json:
        emit_json(done)
    if refused:
        raise SystemExit(refused)


def _transition(event: dict[str, Any]) -> str:
    """``QUEUED -> ADMITTED``; a fact that changed no state (a note, a resubmit) shows the
    state once, never ``QUEUED -> QUEUED``."""
    before, after = event.get("from_state") or "", event.get("to_state") or ""
    return f"{before} -> {after}" if before and before != after else after


@cli.command()
@click.argument("job_id", metavar="JOB", shell_complete=complete_job)
@wide_option
@json_option
def events(job_id: str, wide: bool, as_json: bool) -> None:
    """A job's timeline, oldest first: each change of state, why, and who made it.

    JOB is a job's id, its name (your newest job so named) or 6+ characters of its id. BY is
    the person who acted (cancelled it, say); "-" is the portal or the cluster. Long messages
    end in an ellipsis to fit 100 columns; --wide prints them whole.

    \b
    Example:
      gpupool events resnet50
      gpupool events 3f9c2f --json | jq -r '.[].reason'
    """
    found = job_ref(job_id)
    params: dict[str, Any] = {"page_size": 1000}
    rows: list[dict[str, Any]] = []
    page = client().get(f"jobs/{found}/events/", params)
    while True:
        rows.extend(page["results"])
        if not page.get("next"):
            break
        page = client().get(f"jobs/{found}/events/", {**params, "cursor": _cursor(page["next"])})
    if as_json:
        emit_json(rows)
        return
    table(
        rows,
        [
            ("TIME", lambda e: when(e.get("created_at"))),
            ("STATE", _transition),
            ("REASON", lambda e: e.get("reason")),
            ("BY", lambda e: e.get("actor")),
            ("MESSAGE", lambda e: e.get("message")),
        ],
        width=None if wide else WIDTH,
        shrink=("MESSAGE", "REASON"),
    )
