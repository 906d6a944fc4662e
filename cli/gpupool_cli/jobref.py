"""A job named as a person names it: its full id, its name, or a prefix of its id.

The REST API finds a job by its full id only (``GET jobs/{id}/``) and its list has no name or
id filter, so the other two are resolved here, over the list (``GET jobs/``, newest first, the
caller's teams only), in this order:

1. a full id (a UUID) is used as it is: the portal answers 404 for a job you may not see;
2. a name: your own job of that name, the newest when several share it (``?mine=true``);
3. a prefix of an id, 6 characters or more (hex digits, dashes allowed): the one job of your
   teams whose id starts so; several are an error listing them, none is "not found".

Names are matched before prefixes, so a job named ``deadbeef`` is found by its name. The list
is read at most :data:`SCAN_LIMIT` jobs deep (newest first): a job older than that is named by
its full id.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from gpupool_cli.api import EXIT_BAD_INPUT, EXIT_NOT_FOUND, ApiError, Client

MIN_PREFIX = 6
PAGE_SIZE = 500  # the API's largest page
SCAN_LIMIT = 10_000  # jobs read, newest first, before giving up on a name or prefix
CANDIDATES_SHOWN = 10

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
_HEX = re.compile(r"[0-9a-f-]+", re.I)


def is_full_id(ref: str) -> bool:
    return bool(_UUID.fullmatch(ref))


def id_prefix(ref: str) -> str:
    """``ref`` lower-cased when it can be an id prefix (6+ hex digits, dashes allowed), else
    ``""``."""
    if _HEX.fullmatch(ref) and len(ref.replace("-", "")) >= MIN_PREFIX:
        return ref.lower()
    return ""


def jobs_walk(client: Client, params: dict[str, Any], limit: int = SCAN_LIMIT) -> Iterator[Any]:
    """The jobs ``GET jobs/`` lists with ``params``, newest first, page after page, at most
    ``limit`` of them."""
    from urllib.parse import parse_qs, urlparse

    seen = 0
    query: dict[str, Any] = {**params, "page_size": min(PAGE_SIZE, limit)}
    while True:
        page = client.get("jobs/", query)
        for job in page.get("results", []):
            yield job
            seen += 1
            if seen >= limit:
                return
        if not page.get("next"):
            return
        cursor = parse_qs(urlparse(page["next"]).query).get("cursor", [""])[0]
        query = {**query, "cursor": cursor}


def _me(client: Client) -> str | None:
    """The caller's username, read off their newest job (None when they have none: then no
    job is theirs by name either)."""
    page = client.get("jobs/", {"mine": "true", "page_size": 1})
    results = page.get("results") or []
    return results[0]["owner"] if results else None


def _line(job: dict[str, Any]) -> str:
    state = job.get("status") or job.get("state")
    submitted = str(job.get("submitted_at") or "")[:19].replace("T", " ")
    return f"  {job['id']}  {job['name']}  ({job['owner']}, {state}, submitted {submitted})"


def job_resolve(client: Client, ref: str) -> str:
    """The full id of the job ``ref`` names (see the module's doc); an :class:`ApiError` when
    it names none (exit 3) or a prefix names several (exit 2, the candidates listed)."""
    ref = ref.strip()
    if not ref:
        raise ApiError("job: give a job's name, its id, or 6+ characters of its id", EXIT_BAD_INPUT)
    if is_full_id(ref):
        return ref.lower()
    prefix = id_prefix(ref)
    if not prefix:
        for job in jobs_walk(client, {"mine": "true"}):
            if job["name"] == ref:
                return str(job["id"])
        short = " (an id prefix needs at least 6 characters)" if _HEX.fullmatch(ref) else ""
        raise ApiError(
            f"job: none of your jobs is named {ref!r}{short}; `gpupool ls --mine` lists them",
            EXIT_NOT_FOUND,
        )
    me = _me(client)
    matches: list[dict[str, Any]] = []
    scanned = 0
    for job in jobs_walk(client, {}):
        scanned += 1
        if me is not None and job["owner"] == me and job["name"] == ref:
            return str(job["id"])  # the newest of mine by that name: a name wins
        if str(job["id"]).startswith(prefix):
            matches.append(job)
    if len(matches) == 1:
        return str(matches[0]["id"])
    if not matches:
        depth = f" (the newest {SCAN_LIMIT:,} were read)" if scanned >= SCAN_LIMIT else ""
        raise ApiError(
            f"job: no job of your teams is named {ref!r} or has an id starting {prefix!r}{depth}",
            EXIT_NOT_FOUND,
        )
    listed = "\n".join(_line(job) for job in matches[:CANDIDATES_SHOWN])
    more = len(matches) - CANDIDATES_SHOWN
    tail = f"\n  ... and {more} more" if more > 0 else ""
    raise ApiError(
        f"job: {len(matches)} jobs have an id starting {prefix!r}; give more of the id, "
        f"or the name:\n{listed}{tail}",
        EXIT_BAD_INPUT,
    )
