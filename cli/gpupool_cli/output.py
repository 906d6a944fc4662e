"""Plain-text tables for people and JSON for scripts (``--json``), on stdout; errors on
stderr, so a script's pipe only ever sees data."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click

from gpupool_cli.api import ApiError

Column = tuple[str, Callable[[dict[str, Any]], Any]]


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def when(value: Any) -> str:
    """An ISO 8601 time as ``2026-05-01 12:34:56`` (UTC, as the API gives it)."""
    if not value:
        return "-"
    text = str(value).replace("T", " ")
    return text[:19]


def table(rows: Iterable[dict[str, Any]], columns: Sequence[Column]) -> None:
    """Left-aligned columns, one header line; "(none)" for no rows."""
    grid = [[cell(get(row)) for _, get in columns] for row in rows]
    if not grid:
        click.echo("(none)")
        return
    headers = [name for name, _ in columns]
    widths = [max(len(h), *(len(r[i]) for r in grid)) for i, h in enumerate(headers)]
    for line in [headers, *grid]:
        click.echo("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())


def pairs(items: Sequence[tuple[str, Any]]) -> None:
    """``key: value`` lines, the keys aligned."""
    width = max(len(k) for k, _ in items)
    for key, value in items:
        click.echo(f"{key + ':':<{width + 1}} {cell(value)}")


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def error_print(error: ApiError) -> None:
    """The API's message, then each field's errors (``field: message``), on stderr."""
    prefix = f"error ({error.status})" if error.status else "error"
    click.echo(f"{prefix}: {error.message}", err=True)
    for field, messages in sorted(error.fields.items()):
        texts = messages if isinstance(messages, list) else [messages]
        for text in texts:
            click.echo(f"  {field}: {text}", err=True)
    sys.stderr.flush()
