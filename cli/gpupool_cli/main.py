"""The ``gpupool`` commands. Each one is a thin reading of one REST operation: the portal
decides everything (validation, tenancy, quotas), the CLI only shapes requests and answers.

Exit codes (``docs/cli.md``): 0 ok, 1 the job ended FAILED or CANCELLED (``submit --wait``),
2 bad input (the API's field errors are printed), 3 not found, 4 refused (401, 403, 409, 429),
5 server or connection error, 130 stopped with Ctrl-C.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import yaml
from click.shell_completion import CompletionItem

from gpupool_cli import __version__
from gpupool_cli.api import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_JOB_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    ApiError,
    Client,
    Settings,
    config_path,
    config_write,
    settings_load,
    url_normalize,
)
from gpupool_cli.forward import forward_server
from gpupool_cli.jobref import MIN_PREFIX, id_prefix, job_resolve
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
from gpupool_cli.weblogin import browser_login

TERMINAL_STATES = {"SUCCEEDED", "FAILED", "CANCELLED"}
JOB_STATES = [
    "QUEUED", "ADMITTED", "SUBMITTED", "RUNNING", "PREEMPTING", "CANCELLING",
    "SUCCEEDED", "FAILED", "CANCELLED",
]  # fmt: skip
LIST_FIELDS = {"command", "args"}  # a string here is split as a shell would
TEXT_FIELDS = {"name", "image", "team"}  # --set keeps these as typed

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Cli(click.Group):
    """Turns an :class:`ApiError` from any command into its message and exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ApiError as error:
            error_print(error)
            ctx.exit(error.exit_code)
        except KeyboardInterrupt:  # Ctrl-C (how `logs -f` is stopped): never exit 1's meaning
            click.echo("", err=True)
            ctx.exit(EXIT_INTERRUPTED)


def client() -> Client:
    """The API client of this invocation, made on first use (``login`` needs none)."""
    ctx = click.get_current_context()
    root = ctx.find_root()
    if root.obj is None:
        root.obj = Client(settings_load())
        root.call_on_close(root.obj.close)  # no kept-alive connection outlives the command
    return root.obj  # type: ignore[no-any-return]


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


# ---------------------------------------------------------------------------------------------
# Shell completion of what the portal knows: a job's name or id, a team's slug. It asks the
# API with the saved settings; any trouble (not logged in, portal down) completes nothing.
# ---------------------------------------------------------------------------------------------
def _completing(ask: Callable[[Client], list[CompletionItem]]) -> list[CompletionItem]:
    try:
        asker = Client(settings_load(), retries=1)
    except ApiError:
        return []
    try:
        return ask(asker)
    except Exception:  # a completion never fails the shell's prompt
        return []
    finally:
        asker.close()


def complete_job(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Your recent jobs' names (newest first, each once) that start with what is typed; ids of
    your teams' recent jobs too once a hex prefix is typed."""

    def ask(api: Client) -> list[CompletionItem]:
        mine = api.get("jobs/", {"mine": "true", "page_size": 200})["results"]
        names: dict[str, dict[str, Any]] = {}
        for job in mine:
            names.setdefault(job["name"], job)
        items = [
            CompletionItem(name, help=f"{job.get('status') or job['state']}, {job['team']}")
            for name, job in names.items()
            if name.startswith(incomplete)
        ]
        if incomplete and id_prefix(incomplete.ljust(MIN_PREFIX, "0")):
            recent = api.get("jobs/", {"page_size": 200})["results"]
            items += [
                CompletionItem(str(job["id"]), help=f"{job['name']} ({job['owner']})")
                for job in recent
                if str(job["id"]).startswith(incomplete.lower())
            ]
        return items

    return _completing(ask)


def complete_team(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """The slugs of your teams that start with what is typed."""

    def ask(api: Client) -> list[CompletionItem]:
        return [
            CompletionItem(team["slug"], help=team.get("name") or "")
            for team in api.get("teams/")
            if str(team["slug"]).startswith(incomplete)
        ]

    return _completing(ask)


def job_ref(ref: str) -> str:
    """The full id of the job ``ref`` names: its id, its name (your newest job so named) or
    6+ characters of its id (:mod:`gpupool_cli.jobref`)."""
    return job_resolve(client(), ref)


@click.group(cls=Cli, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="gpupool")
def cli() -> None:
    """Submit and follow jobs on a gpupool portal from the terminal.

    \b
    First:   gpupool login --url https://gpupool.example.org
    Then:    gpupool submit -f job.yaml --wait
             gpupool ls --state RUNNING
             gpupool logs resnet50 -f      # a job: its name, id, or 6+ of its id

    Settings come from GPUPOOL_URL and GPUPOOL_TOKEN when set, else from the file `login`
    writes. Exit codes: 0 ok, 1 job failed (--wait), 2 bad input, 3 not found, 4 refused,
    5 server or connection error.
    """


# ---------------------------------------------------------------------------------------------
# login
# ---------------------------------------------------------------------------------------------
@cli.command()
@click.option(
    "--url", prompt="Portal URL", help="The portal's address, e.g. https://gpupool.example.org"
)
@click.option(
    "--token",
    help="Log in with an API token made on the portal's /tokens/ page instead of the browser; "
    "'-' reads it from stdin.",
)
@click.option(
    "--no-browser",
    is_flag=True,
    help="Print the sign-in address instead of opening a browser (for a browser elsewhere).",
)
@click.option(
    "--timeout",
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait for the browser.",
)
def login(url: str, token: str | None, no_browser: bool, timeout: float) -> None:
    """Sign in through the browser (or with an API token) and save the URL and token.

    Without --token, the CLI opens the portal's sign-in page in your browser; sign in as you
    always do there (password, LDAP or SSO) and click Authorize. The portal then hands this
    command a new API token named "gpupool CLI on <this host>" (see `gpupool tokens`).

    The token is saved in ~/.config/gpupool/config ($XDG_CONFIG_HOME), readable by you only
    (mode 0600). A token the portal refuses is not saved (exit 4).

    \b
    Example:
      gpupool login --url https://gpupool.example.org
      gpupool login --url https://gpupool.example.org --no-browser   # over SSH
      echo "$TOKEN" | gpupool login --url https://gpupool.example.org --token -
    """
    portal = url_normalize(url)
    if token == "-":
        token = sys.stdin.readline().strip()
        if not token:
            raise ApiError("token: an API token is required", EXIT_BAD_INPUT)
    elif token is None:
        token, _username = browser_login(
            portal,
            open_browser=not no_browser,
            timeout=timeout,
            say=lambda text: click.echo(text, err=True),
        )
    if not token:
        raise ApiError("token: an API token is required", EXIT_BAD_INPUT)
    settings = Settings(url=portal, token=token)
    checker = Client(settings)
    try:
        teams = checker.get("teams/")
    finally:
        checker.close()
    path = config_write(settings.url, settings.token)
    names = ", ".join(t["slug"] for t in teams) or "no team yet"
    click.echo(f"Logged in to {settings.url} (teams: {names}); saved to {path}")


# ---------------------------------------------------------------------------------------------
# submit
# ---------------------------------------------------------------------------------------------
def _spec_file(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ApiError(f"{path}: {error.strerror}", EXIT_BAD_INPUT) from error
    try:
        data = yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as error:
        raise ApiError(f"{path}: not valid YAML or JSON: {error}", EXIT_BAD_INPUT) from error
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ApiError(f"{path}: must be a mapping of the job's fields", EXIT_BAD_INPUT)
    return data


def _set(body: dict[str, Any], assignment: str) -> None:
    """``key=value``, the value read as YAML (2, true, [a, b]); ``env.NAME=value`` sets one
    entry of a mapping field."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ApiError(f"--set {assignment!r}: expected key=value", EXIT_BAD_INPUT)
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    if key.split(".")[-1] in TEXT_FIELDS or key.startswith("env."):
        value = raw  # never turn a name like 2024 or "on" into a number or a boolean
    *parents, last = key.split(".")
    target = body
    for part in parents:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ApiError(f"--set {key}: {part} is not a mapping", EXIT_BAD_INPUT)
    target[last] = value


def _template(name: str) -> dict[str, Any]:
    templates = client().get("templates/")
    found = [t for t in templates if name in (t.get("name"), t.get("key"), str(t.get("id")))]
    if not found:
        raise ApiError(
            f"template: no template named {name!r} (see the portal's /templates/)", EXIT_NOT_FOUND
        )
    if len(found) > 1:
        choices = ", ".join(f"{t['id']} ({t['scope']} {t.get('team') or ''})" for t in found)
        raise ApiError(
            f"template: {len(found)} templates are named {name!r}; give one's id: {choices}",
            EXIT_BAD_INPUT,
        )
    return dict(found[0].get("spec") or {})


def _only_team() -> str | None:
    teams = client().get("teams/")
    return teams[0]["slug"] if len(teams) == 1 else None


def job_wait(job_id: str, interval: float, quiet: bool) -> dict[str, Any]:
    """Poll the job until it ends, telling each change of its status (RESTARTING included,
    with its reason) on stderr."""
    state = None
    while True:
        try:
            job: dict[str, Any] = client().get(f"jobs/{job_id}/")
        except KeyboardInterrupt:
            click.echo(f"\nstopped waiting; the job goes on: gpupool show {job_id}", err=True)
            raise
        status = job.get("status") or job["state"]
        if status != state:
            state = status
            if not quiet:
                reason = job.get("status_reason") or (
                    job.get("pending_reason") if state == "QUEUED" else ""
                )
                click.echo(f"{job_id}: {state}" + (f" ({reason})" if reason else ""), err=True)
        if job["state"] in TERMINAL_STATES:
            return job
        try:
            time.sleep(interval)
        except KeyboardInterrupt:
            click.echo(f"\nstopped waiting; the job goes on: gpupool show {job_id}", err=True)
            raise


def _job_outcome(job: dict[str, Any]) -> int:
    return EXIT_OK if job["state"] == "SUCCEEDED" else EXIT_JOB_FAILED


def _apply_sets(body: dict[str, Any], sets: tuple[str, ...]) -> None:
    """Each --set onto ``body``; a command or args given as a string split as a shell would."""
    for assignment in sets:
        _set(body, assignment)
    for field in LIST_FIELDS:
        if isinstance(body.get(field), str):
            body[field] = shlex.split(body[field])


def _post_and_follow(
    body: dict[str, Any], idempotency_key: str | None, wait: bool, interval: float, as_json: bool
) -> None:
    """POST ``body`` as a job (submit, resubmit), say what was made, and with ``wait`` follow
    it to its end, exiting 1 unless it SUCCEEDED."""
    key = idempotency_key or f"cli-{uuid.uuid4()}"
    job = client().post("jobs/", body, idempotency_key=key)
    if not as_json:
        click.echo(f"{job['id']}  {job['name']}  team {job['team']}  {job['state']}")
    if wait:
        job = job_wait(job["id"], interval, quiet=as_json)
        if not as_json:
            tail = f": {job['pending_reason']}" if job.get("pending_reason") else ""
            click.echo(f"{job['id']} ended {job['state']}{tail}")
    if as_json:
        emit_json(job)
    if wait:
        click.get_current_context().exit(_job_outcome(job))


def _job_body(
    path: str | None, sets: tuple[str, ...], template: str | None, team: str | None
) -> dict[str, Any]:
    """A job's REST fields from a template, a file and --set, later sources winning (what
    submit sends, and estimate asks about)."""
    if not path and not template:
        raise click.UsageError("give a job file (-f job.yaml), a --template, or both")
    body: dict[str, Any] = _template(template) if template else {}
    if path:
        body.update(_spec_file(path))
    _apply_sets(body, sets)
    if team:
        body["team"] = team
    if not body.get("team"):
        only = _only_team()
        if only:
            body["team"] = only
    return body


@cli.command()
@click.option(
    "-f", "--file", "path", metavar="PATH", help="YAML or JSON with the REST fields; - for stdin."
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a field (repeatable); the value is read as YAML.",
)
@click.option("--template", metavar="NAME", help="Start from a template (its name, key or id).")
@click.option(
    "--team",
    help="Team slug (default: the file's, or your only team).",
    shell_complete=complete_team,
)
@click.option("--wait", is_flag=True, help="Follow the job to its end; exit 1 unless it SUCCEEDED.")
@click.option(
    "--interval", default=5.0, show_default=True, metavar="SECONDS", help="How often --wait asks."
)
@click.option(
    "--idempotency-key",
    metavar="KEY",
    help="Repeat a submit safely (default: a new random key, reused by this run's retries).",
)
@json_option
def submit(
    path: str | None,
    sets: tuple[str, ...],
    template: str | None,
    team: str | None,
    wait: bool,
    interval: float,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Submit a job: the fields of POST /api/v1/jobs/, from a file, a template and --set.

    Later sources win: the template's spec, then the file, then each --set. `command` and
    `args` may be a string, split as a shell would. The submit carries an Idempotency-Key,
    so a retry after a lost answer returns the same job, never a second one.

    \b
    Example (job.yaml):
      name: resnet50
      team: vision
      image: nvcr.io/nvidia/pytorch:24.05-py3
      command: torchrun train.py --epochs 10
      replicas: 2
      gpus_per_replica: 4
      min_gpu_memory_gib: 40
    \b
      gpupool submit -f job.yaml --set replicas=1 --wait
      gpupool submit --template "GPU smoke test" --set name=smoke --team vision
    """
    _post_and_follow(
        _job_body(path, sets, template, team), idempotency_key, wait, interval, as_json
    )


@cli.command()
@click.argument("job_id", metavar="JOB", shell_complete=complete_job)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change a field (repeatable); the value is read as YAML.",
)
@click.option("--wait", is_flag=True, help="Follow the job to its end; exit 1 unless it SUCCEEDED.")
@click.option(
    "--interval", default=5.0, show_default=True, metavar="SECONDS", help="How often --wait asks."
)
@click.option(
    "--idempotency-key",
    metavar="KEY",
    help="Repeat a resubmit safely (default: a new random key, reused by this run's retries).",
)
@json_option
def resubmit(
    job_id: str,
    sets: tuple[str, ...],
    wait: bool,
    interval: float,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Submit a job again as it was asked for, with --set changes (the web's Resubmit).

    The portal copies the job's request (POST /api/v1/jobs/ with from_job) and notes on the
    new job's timeline which job it came from. JOB is a job's id, its name (your newest job so
    named) or 6+ characters of its id: any job of your teams, finished or not.

    \b
    Example:
      gpupool resubmit resnet50
      gpupool resubmit 3f9c2f --set replicas=1 --set name=resnet50-small --wait
    """
    body: dict[str, Any] = {"from_job": job_ref(job_id)}
    _apply_sets(body, sets)
    _post_and_follow(body, idempotency_key, wait, interval, as_json)


@cli.command()
@click.argument("job_id", metavar="[JOB]", required=False, shell_complete=complete_job)
@click.option(
    "-f", "--file", "path", metavar="PATH", help="YAML or JSON with the REST fields; - for stdin."
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a field (repeatable).")
@click.option("--template", metavar="NAME", help="Start from a template (its name, key or id).")
@click.option(
    "--team",
    help="Team slug (default: the file's, or your only team).",
    shell_complete=complete_team,
)
@json_option
def estimate(
    job_id: str | None,
    path: str | None,
    sets: tuple[str, ...],
    template: str | None,
    team: str | None,
    as_json: bool,
) -> None:
    """When a job would start, on which model and cluster, and what could start sooner.

    For a job not yet submitted, the same fields as submit (nothing is stored); for a queued
    job, its id, name or id prefix. Each alternative (another model it allows, fewer
    replicas) is simulated on the queue as it is now: an estimate, not a promise.

    \b
    Example:
      gpupool estimate -f job.yaml
      gpupool estimate -f job.yaml --set replicas=2
      gpupool estimate resnet50          # a queued job: its name, id or id prefix
    """
    if job_id and (path or template or sets):
        raise click.UsageError("give a queued job, or a job spec (-f/--template), not both")
    if job_id:
        answer = client().get(f"jobs/{job_ref(job_id)}/estimate/")
    else:
        answer = client().post("jobs/estimate/", _job_body(path, sets, template, team))
    if as_json:
        emit_json(answer)
        return
    best = answer.get("estimate")
    if best:
        pairs(
            [
                ("starts", best.get("summary") or best.get("starts") or when(best.get("start_at"))),
                ("most likely", when(best.get("start_at"))),
                ("model", best.get("model_name") or best.get("model")),
                ("cluster", best.get("cluster")),
                ("why", best.get("why")),
            ]
        )
    else:
        click.echo(f"no estimate: {answer.get('why') or 'the portal gave no reason'}")
    alternatives = answer.get("alternatives") or []
    sooner = [a for a in alternatives if a.get("sooner")]
    if sooner:
        click.echo("\nasked differently, it could start sooner:")
        table(
            sooner,
            [
                ("ALTERNATIVE", lambda a: a.get("label")),
                ("STARTS", lambda a: a.get("starts") or "no estimate"),
                ("MODEL", lambda a: a.get("model")),
                ("CLUSTER", lambda a: a.get("cluster")),
            ],
        )
    rest = [a for a in alternatives if not a.get("sooner")]
    if rest:  # no better: one line, so the table shows only what would help
        said = ", ".join(f"{a.get('label')} ({a.get('starts') or 'no estimate'})" for a in rest)
        click.echo(f"\n{'not sooner' if sooner else 'no other way to ask starts sooner'}: {said}")


# ---------------------------------------------------------------------------------------------
# ls, show, cancel
# ---------------------------------------------------------------------------------------------
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


SHRINKABLE = ("NAME", "REASON", "TEAM", "OWNER", "MODEL")


def _fit(wide: bool) -> dict[str, Any]:
    """How a table is drawn: all of it with --wide, else in :data:`WIDTH` columns."""
    return {} if wide else {"width": WIDTH, "shrink": SHRINKABLE}


wide_option = click.option(
    "--wide", is_flag=True, help=f"Show every column whole (default: fit {WIDTH} columns)."
)
watch_option = click.option(
    "-w", "--watch", is_flag=True, help="Redraw every --interval seconds until Ctrl-C."
)


watch_interval_option = click.option(
    "--interval",
    default=2.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    metavar="SECONDS",
    help="How often --watch redraws.",
)


def watch_or_print(render: Callable[[], list[str]], watch: bool, interval: float) -> None:
    """Print ``render()``'s lines once, or with ``watch`` again every ``interval`` seconds
    until Ctrl-C (exit 130), as ``watch`` and ``kubectl get -w`` do: on a terminal the screen
    is cleared and redrawn, each draw under a line saying when it was read; elsewhere (a pipe,
    a file) each draw follows the last."""
    if not watch:
        for line in render():
            click.echo(line)
        return
    title = click.get_current_context().command_path
    terminal = sys.stdout.isatty()
    while True:
        lines = render()  # read before clearing: the screen is never blank while it waits
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if terminal:
            click.clear()
        click.echo(f"Every {interval:g}s: {title}    {stamp}\n")
        click.echo("\n".join(lines))
        if not terminal:
            click.echo("")
        sys.stdout.flush()
        time.sleep(interval)


def _no_json_with_watch(watch: bool, as_json: bool) -> None:
    if watch and as_json:
        raise click.UsageError("--watch draws a table: leave out --json (or poll with --json)")


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


# ---------------------------------------------------------------------------------------------
# logs
# ---------------------------------------------------------------------------------------------
@cli.command()
@click.argument("job_id", metavar="JOB", shell_complete=complete_job)
@click.option(
    "--replica", default=0, show_default=True, type=click.IntRange(0), help="0-based replica."
)
@click.option(
    "--tail", type=click.IntRange(1), help="The last N lines (the API's default when omitted)."
)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("--timestamps", is_flag=True, help="Prefix each line with its time.")
@click.option("--previous", is_flag=True, help="The run before the container last restarted.")
@click.option(
    "--interval", default=3.0, show_default=True, metavar="SECONDS", help="How often --follow asks."
)
def logs(
    job_id: str,
    replica: int,
    tail: int | None,
    follow: bool,
    timestamps: bool,
    previous: bool,
    interval: float,
) -> None:
    """Print a replica's log; -f follows it until the job ends.

    Following reads after the last line's cursor (the API's next_since), so no line is
    printed twice. JOB is a job's id, its name (your newest job so named) or 6+ characters of
    its id.

    \b
    Example:
      gpupool logs resnet50 --replica 1 --tail 100
      gpupool logs 3f9c2f -f
    """
    job_id = job_ref(job_id)
    params: dict[str, Any] = {
        "replica": replica,
        "tail": tail,
        "timestamps": "true" if timestamps else None,
        "attempt": "previous" if previous else None,
    }
    since = ""
    told = ""
    while True:
        answer = client().get(f"jobs/{job_id}/logs/", {**params, "since": since or None})
        if answer.get("text"):
            text = answer["text"]
            click.echo(text, nl=not text.endswith("\n"))
        elif not answer.get("available") and answer.get("message") != told:
            told = answer.get("message") or ""
            click.echo(told, err=True)
        since = answer.get("next_since") or since
        if not follow or not answer.get("running"):
            return
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------
# port-forward
# ---------------------------------------------------------------------------------------------
@cli.command("port-forward")
@click.argument("job_id", metavar="JOB", shell_complete=complete_job)
@click.argument("local_port", metavar="[LOCAL_PORT]", required=False, type=click.IntRange(0, 65535))
@click.option(
    "--address",
    default="127.0.0.1",
    show_default=True,
    help="The local address to listen on (0.0.0.0: every interface; anyone who reaches it "
    "calls the server as you).",
)
def port_forward(job_id: str, local_port: int | None, address: str) -> None:
    """Call an inference job's server on a local port, through the portal.

    Each HTTP request to http://127.0.0.1:LOCAL_PORT/PATH goes to the job's server as
    PATH, through the portal (with your token: members and admins of the job's team only)
    and the cluster's API server, so it works wherever the portal does, without a route to
    the cluster. LOCAL_PORT defaults to the job's own port, 0 picks a free one. Runs until
    Ctrl-C. HTTP only (not a raw TCP tunnel); answers are relayed whole, not streamed.

    \b
    Example:
      gpupool port-forward llama-serve 8000 &
      curl -s localhost:8000/v1/models
      curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \\
           -d '{"prompt": "Hello"}'
    """
    found = job_ref(job_id)
    job = client().get(f"jobs/{found}/")
    if job.get("kind") != "inference" or not job.get("port"):
        raise ApiError(
            f"{job['name']}: not an inference job with a port; nothing to forward to",
            EXIT_BAD_INPUT,
        )
    if job["state"] in TERMINAL_STATES:
        raise ApiError(
            f"{job['name']} has ended ({job['state']}); its server is gone", EXIT_REFUSED
        )
    port = job["port"] if local_port is None else local_port
    try:
        server = forward_server(
            client(), found, address, port, say=lambda text: click.echo(text, err=True)
        )
    except OSError as error:
        raise ApiError(
            f"local_port: cannot listen on {address}:{port}: {error.strerror}", EXIT_BAD_INPUT
        ) from error
    bound = server.server_address[1]
    click.echo(
        f"Forwarding http://{address}:{bound} -> job {job['name']} port {job['port']} "
        "(through the portal); Ctrl-C stops",
        err=True,
    )
    endpoint = job.get("endpoint") or {}
    if job["state"] != "RUNNING" or not endpoint.get("ready"):
        click.echo(
            f"{job['name']} is {job.get('status') or job['state']}, not serving yet: requests "
            "answer 409 or 503 until it is",
            err=True,
        )
    try:
        server.serve_forever()
    finally:
        server.server_close()


# ---------------------------------------------------------------------------------------------
# queue, quota, usage
# ---------------------------------------------------------------------------------------------
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


@cli.command()
@json_option
def tokens(as_json: bool) -> None:
    """Your API tokens: which one this CLI uses (*), when each expires, which are revoked.

    Make and revoke tokens on the portal's /tokens/ page.

    \b
    Example:
      gpupool tokens
    """
    rows = client().get("tokens/")
    if as_json:
        emit_json(rows)
        return
    now = datetime.now(UTC).isoformat()
    table(
        rows,
        [
            ("", lambda t: "*" if t.get("current") else " "),
            ("NAME", lambda t: t["name"]),
            ("PREFIX", lambda t: t["prefix"]),
            ("CREATED", lambda t: when(t.get("created_at"))),
            ("EXPIRES", lambda t: when(t.get("expires_at"))),
            ("LAST USED", lambda t: when(t.get("last_used_at"))),
            ("STATUS", lambda t: _token_status(t, now)),
        ],
    )


def _token_status(token: dict[str, Any], now: str) -> str:
    if token.get("revoked_at"):
        return "revoked"
    expires = datetime.fromisoformat(str(token["expires_at"]).replace("Z", "+00:00"))
    return "expired" if expires <= datetime.fromisoformat(now) else "active"


# ---------------------------------------------------------------------------------------------
# the catalog: GPU models and shared pools
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# config, completion
# ---------------------------------------------------------------------------------------------
@cli.command()
def whoami() -> None:
    """Where the CLI points, and your teams and roles there.

    \b
    Example:
      gpupool whoami
    """
    settings = settings_load()
    source = "environment" if os.environ.get("GPUPOOL_URL") else str(config_path())
    teams = client().get("teams/")
    click.echo(f"portal: {settings.url} (from {source})")
    table(teams, [("TEAM", lambda t: t["slug"]), ("ROLE", lambda t: t.get("role"))])


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    Example:
      gpupool completion bash > ~/.local/share/bash-completion/completions/gpupool
      eval "$(gpupool completion zsh)"      # in ~/.zshrc
    """
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    if completer is None:  # click knows these three; a guard for older ones
        raise ApiError(f"shell: {shell} is not supported", EXIT_BAD_INPUT)
    click.echo(completer(cli, {}, "gpupool", "_GPUPOOL_COMPLETE").source())


def main() -> None:
    """The console script's entry point."""
    cli(prog_name="gpupool")
