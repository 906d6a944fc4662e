"""Account commands: ``login`` (through the browser, or with an API token), ``whoami``,
``tokens``, and ``completion`` (the shell's completion script)."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from typing import Any

import click

from gpupool_cli.api import (
    EXIT_BAD_INPUT,
    ApiError,
    Client,
    Settings,
    config_path,
    config_write,
    settings_load,
    url_normalize,
)
from gpupool_cli.app import cli, client, json_option
from gpupool_cli.output import emit_json, table, when
from gpupool_cli.weblogin import browser_login


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
