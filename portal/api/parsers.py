"""The API's body parsers: every string a body carries can be stored, and JSON has a depth.

One place for the whole API instead of a check per field: PostgreSQL text cannot hold NUL
(``"team": "vis\\u0000ion"`` was a 500 from the database, on submit and on the quota POST),
an unpaired surrogate (``"\\ud800"``) cannot be encoded to UTF-8 for it at all, and JSON
nested a thousand levels deep made the decoder itself raise ``RecursionError`` (another 500).
Each is now a 400 in the API's error shape naming the field, before any view sees the data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from django.http import QueryDict
from rest_framework import parsers
from rest_framework.exceptions import ParseError

from portal.errors import ApplicationError

MAX_JSON_DEPTH = 32
"""Arrays and objects inside each other. A job body is 3 deep, a batch 4."""

NUL_MESSAGE = "May not contain NUL characters."
SURROGATE_MESSAGE = "May not contain unpaired surrogate characters."
_SURROGATE = re.compile("[\ud800-\udfff]")
# How a NUL or a lone surrogate can appear in JSON text at all: as an escape (raw control
# characters are invalid JSON, raw surrogates invalid UTF-8). A body without one skips the walk.
_RISKY_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


class StrictJSONParser(parsers.JSONParser):
    """DRF's JSON parser, with a nesting limit and no NUL or unpaired surrogate in any string."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = parsers.get_encoding(parser_context or {})
        try:
            text = stream.read().decode(encoding)
        except UnicodeDecodeError:
            raise ParseError(f"JSON parse error - the body is not valid {encoding}.") from None
        try:
            data = json.loads(text, parse_constant=_refuse_constant)
        except RecursionError:
            raise _too_deep() from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        strings = _RISKY_ESCAPE.search(text) is not None
        if strings or text.count("[") + text.count("{") > MAX_JSON_DEPTH:
            _check_json(data, strings=strings)
        return data


class StrictFormParser(parsers.FormParser):
    """DRF's form parser; a NUL in a field's name or value is a 400 naming the field."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        _check_form(data)
        return data


class StrictMultiPartParser(parsers.MultiPartParser):
    """DRF's multipart parser; a NUL in a field's name or value is a 400 naming the field."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        result = super().parse(stream, media_type, parser_context)
        _check_form(result.data)
        return result


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _too_deep() -> ApplicationError:
    return ApplicationError(
        f"The JSON body is nested more than {MAX_JSON_DEPTH} levels deep.",
        fields={"body": [f"At most {MAX_JSON_DEPTH} levels of arrays and objects."]},
    )


def _check_json(data: Any, *, strings: bool) -> None:
    """Raise when ``data`` nests too deep or (``strings``) holds a string that cannot be stored.

    Iterative, so the walk itself cannot run out of stack; the field names are only worked out
    when something is wrong.
    """
    stack: list[tuple[Any, int]] = [(data, 0)]
    bad = False
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            if depth >= MAX_JSON_DEPTH:
                raise _too_deep()
            for key, item in value.items():
                bad = bad or (strings and _unstorable(key) is not None)
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            if depth >= MAX_JSON_DEPTH:
                raise _too_deep()
            stack.extend((item, depth + 1) for item in value)
        elif strings and not bad and isinstance(value, str):
            bad = _unstorable(value) is not None
    if bad:
        fields = dict(_unstorable_strings(data, ""))
        raise ApplicationError(_message(fields), fields=fields)


def _unstorable_strings(value: Any, path: str) -> Iterator[tuple[str, list[str]]]:
    """``(field path, [problem])`` for every bad key or string; ``jobs[0].team`` style names.
    Recursive: only called on data already known to be at most ``MAX_JSON_DEPTH`` deep."""
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{path}.{_printable(key)}" if path else _printable(key)
            if (problem := _unstorable(key)) is not None:
                yield name, [f"The name {problem[0].lower()}{problem[1:]}"]
            yield from _unstorable_strings(item, name)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _unstorable_strings(item, f"{path}[{i}]")
    elif isinstance(value, str) and (problem := _unstorable(value)) is not None:
        yield path or "body", [problem]


def _unstorable(text: str) -> str | None:
    if "\x00" in text:
        return NUL_MESSAGE
    if _SURROGATE.search(text):
        return SURROGATE_MESSAGE
    return None


def _check_form(data: QueryDict) -> None:
    fields = {
        _printable(name): [NUL_MESSAGE]
        for name, values in data.lists()
        if "\x00" in name or any(isinstance(v, str) and "\x00" in v for v in values)
    }
    if fields:
        raise ApplicationError(_message(fields), fields=fields)


def _message(fields: dict[str, list[str]]) -> str:
    names = ", ".join(sorted(fields))
    return f"{names}: NUL and unpaired surrogate characters cannot be stored."


def _printable(name: str) -> str:
    return _SURROGATE.sub("\ufffd", name.replace("\x00", "\\x00"))
