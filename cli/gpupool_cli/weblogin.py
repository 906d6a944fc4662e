"""``gpupool login`` through the browser: the loopback flow with PKCE (RFC 8252, RFC 7636).

The CLI listens on ``127.0.0.1:<a free port>`` for one answer, and sends the browser to the
portal's ``/cli/authorize/`` page with that port, a random ``state`` and the S256 challenge of
a random verifier. The user signs in there however the portal signs people in (password,
LDAP, SSO) and clicks Authorize; the portal sends the browser back to
``http://127.0.0.1:<port>/callback?code=…&state=…``. The CLI checks the state (the answer is
to *this* login), then trades the code and the verifier for a new API token in a POST body
(``/api/v1/cli/token/``). The code alone is worth nothing to anyone who sees it, and the token
is never in a URL.

Where the browser runs on another machine (an SSH session), ``--no-browser`` prints the address
to open there; its last page then fails to reach 127.0.0.1, and its address, pasted here, is
the same answer.
"""

from __future__ import annotations

import base64
import hashlib
import html
import queue
import secrets
import socket
import sys
import threading
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import requests

from gpupool_cli import __version__
from gpupool_cli.api import (
    EXIT_BAD_INPUT,
    EXIT_REFUSED,
    EXIT_SERVER,
    TIMEOUT_SECONDS,
    ApiError,
    _decode,
)

ANSWER_SECONDS = 60  # how long the browser's last page waits for the token's outcome


@dataclass(frozen=True)
class Pkce:
    """A login's secrets: the verifier stays here, its S256 challenge goes to the browser."""

    verifier: str
    challenge: str
    state: str

    @classmethod
    def fresh(cls) -> Pkce:
        verifier = secrets.token_urlsafe(64)  # 86 characters of [A-Za-z0-9_-]
        digest = hashlib.sha256(verifier.encode("ascii")).digest()
        challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
        return cls(verifier=verifier, challenge=challenge, state=secrets.token_urlsafe(24))


class _Answer:
    """The callback's query, handed from the listener to the command, and the command's
    outcome handed back, so that the browser's last page says how it ended."""

    def __init__(self, state: str) -> None:
        self.state = state
        self.port = 0  # the listener's, once bound
        self.arrived: queue.Queue[dict[str, str]] = queue.Queue()
        self.outcome = ""
        self.done = threading.Event()

    def finish(self, outcome: str) -> None:
        self.outcome = outcome
        self.done.set()

    def ours(self, params: dict[str, str]) -> bool:
        """Whether an answer is to this login: anything else on the machine (or a web page
        probing 127.0.0.1) can reach the listener, and must not be able to end the login."""
        return secrets.compare_digest(params.get("state", ""), self.state)


def _handler(answer: _Answer) -> type[BaseHTTPRequestHandler]:
    class Callback(BaseHTTPRequestHandler):
        server_version = f"gpupool-cli/{__version__}"

        def do_GET(self) -> None:
            parsed = urlparse(self.path)
            if parsed.path != "/callback":
                self.send_error(404)
                return
            # The portal sends the browser to 127.0.0.1:<port> by number; any other Host is a
            # name pointed at this machine (DNS rebinding) by a page that is not the portal's.
            if self.headers.get("Host") != f"127.0.0.1:{answer.port}":
                self.send_error(400, "not the address this login listens on")
                return
            params = {k: v[0] for k, v in parse_qs(parsed.query).items()}
            if not answer.ours(params):
                self.send_error(400, "not an answer to this login")
                return
            answer.arrived.put(params)
            answer.done.wait(ANSWER_SECONDS)
            body = (
                "<!doctype html><meta charset='utf-8'><title>gpupool login</title>"
                f"<p>{html.escape(answer.outcome or 'No answer from gpupool login.')}</p>"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the terminal is the user's, not an access log's

    return Callback


def _read_pasted(answer: _Answer) -> None:
    """Lines pasted on stdin: the callback's address, copied from a browser elsewhere."""
    for line in sys.stdin:
        query = urlparse(line.strip()).query
        if "code=" in query or "error=" in query:
            params = {k: v[0] for k, v in parse_qs(query).items()}
            if answer.ours(params):
                answer.arrived.put(params)
                return
            print(
                "That address is not an answer to this login (its state differs).", file=sys.stderr
            )


def authorize_url(portal: str, port: int, pkce: Pkce, machine: str) -> str:
    query = {
        "port": port,
        "state": pkce.state,
        "code_challenge": pkce.challenge,
        "code_challenge_method": "S256",
        "machine": machine,
    }
    return f"{portal}/cli/authorize/?{urlencode(query)}"


def browser_login(
    portal: str,
    *,
    open_browser: bool,
    timeout: float,
    say: Callable[[str], None],
) -> tuple[str, str]:
    """Sign in through the browser; (the new API token, the user's name) or an ApiError."""
    pkce = Pkce.fresh()
    answer = _Answer(pkce.state)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(answer))
    answer.port = server.server_port
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = authorize_url(portal, answer.port, pkce, socket.gethostname())
    try:
        if open_browser:
            say(f"Opening your browser to sign in. If it does not open, visit:\n  {url}")
            webbrowser.open(url)
        else:
            say(
                f"Open this address in a browser and authorize the CLI:\n  {url}\n"
                "If that browser is on another machine, its last page cannot reach "
                "127.0.0.1: paste that page's address here."
            )
            threading.Thread(target=_read_pasted, args=(answer,), daemon=True).start()
        say("Waiting for the browser…")
        try:
            params = answer.arrived.get(timeout=timeout)
        except queue.Empty:
            raise ApiError(
                f"login: no answer from the browser within {timeout:g} s; nothing saved",
                EXIT_REFUSED,
            ) from None
        try:
            token, username = _trade(portal, params, pkce)
        except ApiError as error:
            answer.finish(f"gpupool login failed: {error.message}")
            raise
        answer.finish(
            f"gpupool login is signed in to {portal} as {username}. "
            "You can close this tab and go back to the terminal."
        )
        return token, username
    finally:
        answer.done.set()
        server.shutdown()
        server.server_close()


def _trade(portal: str, params: dict[str, str], pkce: Pkce) -> tuple[str, str]:
    """Check the callback's state, then trade its code (and the verifier) for a token."""
    if not secrets.compare_digest(params.get("state", ""), pkce.state):
        raise ApiError(
            "login: the browser's answer is not for this login (state does not match); "
            "nothing saved",
            EXIT_REFUSED,
        )
    if params.get("error"):
        why = "cancelled in the browser" if params["error"] == "access_denied" else params["error"]
        raise ApiError(f"login: {why}; nothing saved", EXIT_REFUSED)
    if not params.get("code"):
        raise ApiError("login: the browser's answer carries no code", EXIT_BAD_INPUT)
    try:
        response = requests.post(
            f"{portal}/api/v1/cli/token/",
            json={"code": params["code"], "code_verifier": pkce.verifier},
            headers={"Accept": "application/json", "User-Agent": f"gpupool-cli/{__version__}"},
            timeout=TIMEOUT_SECONDS,
        )
    except requests.RequestException as error:
        raise ApiError(f"cannot reach {portal}: {error}", EXIT_SERVER) from error
    try:
        body = _decode(response)
    except ApiError as error:
        if error.status == 400:  # the code or verifier refused: not the caller's typing
            raise ApiError(f"login: {error.message}", EXIT_REFUSED, status=400) from None
        raise
    return str(body["token"]), str(body["username"])
