"""Where the portal is, who the caller is, and one HTTP client for its REST API.

The URL and token come from ``GPUPOOL_URL`` / ``GPUPOOL_TOKEN`` when set, otherwise from the
file ``gpupool login`` writes (``$XDG_CONFIG_HOME/gpupool/config``, by default
``~/.config/gpupool/config``, mode 0600 because it holds a bearer token).

Every failure becomes an :class:`ApiError` carrying the exit code scripts rely on (the table
is in ``docs/cli.md``): 2 bad input, 3 not found, 4 refused, 5 server or connection trouble.
"""

from __future__ import annotations

import configparser
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from gpupool_cli import __version__

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_REFUSED = 4
EXIT_SERVER = 5
EXIT_INTERRUPTED = 130  # the shell's own code for SIGINT

TIMEOUT_SECONDS = 30
# A 429 or 503 says when to come back (Retry-After); we wait at most this long per try.
RETRY_WAIT_MAX_SECONDS = 30


class ApiError(Exception):
    """A request the portal refused or could not answer, with the exit code it maps to."""

    def __init__(
        self,
        message: str,
        exit_code: int,
        *,
        status: int | None = None,
        fields: dict[str, Any] | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.status = status
        self.fields = fields or {}
        self.body = body


def exit_code_for_status(status: int) -> int:
    """The CLI's exit code for an HTTP error status."""
    if status in (400, 413, 422):
        return EXIT_BAD_INPUT
    if status == 404:
        return EXIT_NOT_FOUND
    if status in (401, 403, 405, 409, 429):
        return EXIT_REFUSED
    return EXIT_SERVER


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------
def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpupool" / "config"


@dataclass(frozen=True)
class Settings:
    url: str
    token: str


def config_read() -> dict[str, str]:
    """The saved URL and token (empty when ``gpupool login`` never ran)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(config_path(), encoding="utf-8")
    if not parser.has_section("gpupool"):
        return {}
    return dict(parser["gpupool"])


def config_write(url: str, token: str) -> Path:
    """Save the URL and token, readable by the owner only (0600, folder 0700), created with
    those modes so the token is never readable by others, not even for a moment."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    parser = configparser.ConfigParser(interpolation=None)
    parser["gpupool"] = {"url": url, "token": token}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file may have been created with wider bits
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        parser.write(handle)
    return path


def settings_load() -> Settings:
    """The environment first, then the config file; no URL or token is a bad-input error."""
    saved = config_read()
    url = os.environ.get("GPUPOOL_URL") or saved.get("url", "")
    token = os.environ.get("GPUPOOL_TOKEN") or saved.get("token", "")
    if not url or not token:
        raise ApiError(
            "not logged in: run `gpupool login` or set GPUPOOL_URL and GPUPOOL_TOKEN",
            EXIT_BAD_INPUT,
        )
    return Settings(url=url_normalize(url), token=token)


def url_normalize(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ApiError(f"url: {url!r} must start with http:// or https://", EXIT_BAD_INPUT)
    return url


def retries_from_env() -> int:
    """``GPUPOOL_RETRIES``: tries per safe request (default 3; 1 never repeats)."""
    try:
        return max(1, int(os.environ.get("GPUPOOL_RETRIES", "3")))
    except ValueError:
        return 3


# ---------------------------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------------------------
class Client:
    """``/api/v1/`` with the bearer token; JSON in, JSON out, errors as :class:`ApiError`."""

    def __init__(self, settings: Settings, *, retries: int | None = None) -> None:
        self.base = f"{settings.url}/api/v1/"
        self.retries = retries if retries is not None else retries_from_env()
        self.session = requests.Session()
        self.session.headers.update(
            {
                "Authorization": f"Bearer {settings.token}",
                "Accept": "application/json",
                "User-Agent": f"gpupool-cli/{__version__}",
            }
        )

    def close(self) -> None:
        self.session.close()

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None, *, idempotency_key: str | None = None) -> Any:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self.request("POST", path, json=body if body is not None else {}, headers=headers)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """One call. A GET, or a POST that carries an Idempotency-Key, is repeated after a
        connection error, a 502/503/504 or a 429 (waiting as Retry-After says): the portal
        answers a repeated keyed submit with the job it already made, never a second one. A
        POST without a key is sent once, since it may have been applied."""
        url = self.base + path.lstrip("/")
        clean = {k: v for k, v in (params or {}).items() if v not in (None, "", [], False)}
        safe = method == "GET" or bool(headers and headers.get("Idempotency-Key"))
        tries = self.retries if safe else 1
        for attempt in range(1, tries + 1):
            last = attempt == tries
            try:
                response = self.session.request(
                    method, url, params=clean, json=json, headers=headers, timeout=TIMEOUT_SECONDS
                )
            except requests.RequestException as error:
                if last:
                    raise ApiError(
                        f"cannot reach {self.base}: {error.__class__.__name__}: {error}",
                        EXIT_SERVER,
                    ) from error
                time.sleep(min(2**attempt, RETRY_WAIT_MAX_SECONDS))
                continue
            if response.status_code in (429, 502, 503, 504) and not last:
                time.sleep(_retry_after(response, default=2**attempt))
                continue
            return _decode(response)
        raise AssertionError("unreachable")  # the loop returns or raises on its last try


def _retry_after(response: requests.Response, default: float) -> float:
    try:
        wait = float(response.headers.get("Retry-After", default))
    except ValueError:
        wait = default
    return max(0.0, min(wait, RETRY_WAIT_MAX_SECONDS))


def _decode(response: requests.Response) -> Any:
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = None
    if response.ok:
        if body is None and response.content:
            raise ApiError(
                f"{response.url}: expected JSON, got {response.headers.get('Content-Type')}",
                EXIT_SERVER,
                status=response.status_code,
            )
        return body
    message, fields = f"HTTP {response.status_code}", {}
    if isinstance(body, dict):
        message = str(body.get("message") or body.get("detail") or message)
        extra = body.get("extra")
        if isinstance(extra, dict) and isinstance(extra.get("fields"), dict):
            fields = extra["fields"]
    raise ApiError(
        message,
        exit_code_for_status(response.status_code),
        status=response.status_code,
        fields=fields,
        body=body,
    )
