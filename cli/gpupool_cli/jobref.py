"""A job named as a person names it: its full id, its name, or a prefix of its id.

The REST API finds a job by its full id (``GET jobs/{id}/``) and its list filters by name
(``?name=``) and by id prefix (``?id_prefix=``, a range of the id's index), both within the
caller's teams; resolved here in this order:

1. a full id (a UUID) is used as it is: the portal answers 404 for a job you may not see;
2. a name: your own job of that name, the newest when several share it (``?mine=true``);
3. a prefix of an id, 6 characters or more (hex digits, dashes allowed): the one job of your
   teams whose id starts so; several are an error listing them, none is "not found".

Names are matched before prefixes, so a job named ``deadbeef`` is found by its name.
"""

from __future__ import annotations

import re
from typing import Any

from gpupool_cli.api import EXIT_BAD_INPUT, EXIT_NOT_FOUND, ApiError, Client

MIN_PREFIX = 6
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
    named = _first(client, {"mine": "true", "name": ref}, 1)
    if named:
        return str(named[0]["id"])  # the newest of mine by that name: a name wins
    prefix = id_prefix(ref)
    if not prefix:
        short = " (an id prefix needs at least 6 characters)" if _HEX.fullmatch(ref) else ""
        raise ApiError(
            f"job: none of your jobs is named {ref!r}{short}; `gpupool ls --mine` lists them",
            EXIT_NOT_FOUND,
        )
    matches = _first(client, {"id_prefix": prefix}, CANDIDATES_SHOWN + 1)
    if len(matches) == 1:
        return str(matches[0]["id"])
    if not matches:
        raise ApiError(
            f"job: no job of your teams is named {ref!r} or has an id starting {prefix!r}",
            EXIT_NOT_FOUND,
        )
    listed = "\n".join(_line(job) for job in matches[:CANDIDATES_SHOWN])
    tail = "\n  ... and more" if len(matches) > CANDIDATES_SHOWN else ""
    raise ApiError(
        f"job: several jobs have an id starting {prefix!r}; give more of the id, "
        f"or the name:\n{listed}{tail}",
        EXIT_BAD_INPUT,
    )


def _first(client: Client, params: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """The first ``count`` jobs ``GET jobs/`` lists with ``params`` (newest first)."""
    page = client.get("jobs/", {**params, "page_size": count})
    return list(page.get("results") or [])
