"""The ``gpupool`` command group and what its commands share: the API client of one
invocation, the error handling every command gets (an :class:`ApiError` becomes its message and
exit code), shell completion of job names and team slugs, and the listing options (--wide,
--watch). The commands register themselves on :data:`cli` from :mod:`gpupool_cli.commands`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click
from click.shell_completion import CompletionItem

from gpupool_cli import __version__
from gpupool_cli.api import EXIT_INTERRUPTED, ApiError, Client, settings_load
from gpupool_cli.jobref import MIN_PREFIX, id_prefix, job_resolve
from gpupool_cli.output import WIDTH, error_print

TERMINAL_STATES = {"SUCCEEDED", "FAILED", "CANCELLED"}


JOB_STATES = [
    "QUEUED", "ADMITTED", "SUBMITTED", "RUNNING", "PREEMPTING", "CANCELLING",
    "SUCCEEDED", "FAILED", "CANCELLED",
]  # fmt: skip


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
