"""Plain-text tables for people and JSON for scripts (``--json``), on stdout; errors on
stderr, so a script's pipe only ever sees data."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
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


WIDTH = 100  # the columns a table fits in unless --wide
SHRINK_FLOOR = 10  # a shrinkable column keeps at least this many characters (or its header's)


def _ellipsis() -> str:
    """One character that says "cut here": … where stdout can print it, else ~."""
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        "\u2026".encode(encoding)
    except (LookupError, UnicodeEncodeError):
        return "~"
    return "\u2026"


def ellipsize(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the last one an ellipsis when anything was cut."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + _ellipsis() if width > 0 else ""


def table_lines(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[Column],
    *,
    width: int | None = None,
    shrink: Sequence[str] = (),
) -> list[str]:
    """Left-aligned columns under one header line; ``["(none)"]`` for no rows.

    With ``width``, the columns named in ``shrink`` give up characters, the widest first (each
    down to :data:`SHRINK_FLOOR`), until the line fits, their cut cells ending in an ellipsis;
    the other columns are never cut (ids, states, numbers).
    """
    grid = [[" ".join(cell(get(row)).split()) for _, get in columns] for row in rows]
    if not grid:
        return ["(none)"]
    headers = [name for name, _ in columns]
    widths = [max(len(h), *(len(r[i]) for r in grid)) for i, h in enumerate(headers)]
    if width is not None:
        floors = {i: max(len(h), SHRINK_FLOOR) for i, h in enumerate(headers) if h in shrink}
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        while excess > 0:
            cuttable = [i for i, floor in floors.items() if widths[i] > floor]
            if not cuttable:
                break
            widest = max(cuttable, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1
        grid = [[ellipsize(v, w) for v, w in zip(line, widths, strict=True)] for line in grid]
    return [
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
        for line in [headers, *grid]
    ]


def table(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[Column],
    *,
    width: int | None = None,
    shrink: Sequence[str] = (),
) -> None:
    """:func:`table_lines`, printed."""
    for line in table_lines(rows, columns, width=width, shrink=shrink):
        click.echo(line)


def age(value: Any, now: datetime | None = None) -> str:
    """How long ago an ISO 8601 time was, as kubectl's AGE says it: 45s, 12m, 5h, 3d."""
    if not value:
        return "-"
    try:
        then = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return str(value)
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 120 * 60:
        return f"{seconds // 60}m"
    if seconds < 48 * 3600:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def short_ids(ids: Iterable[str], least: int = 8) -> dict[str, str]:
    """Each id cut to the fewest characters, ``least`` or more, that tell it from the others
    shown with it (``gpupool show`` takes any 6+)."""
    ids = list(dict.fromkeys(ids))
    n = least
    while n < max((len(i) for i in ids), default=0):
        heads = [i[:n] for i in ids]
        if len(set(heads)) == len(heads):
            break
        n += 1
    return {i: i[:n] for i in ids}


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
