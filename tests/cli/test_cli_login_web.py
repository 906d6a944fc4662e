"""``gpupool login`` through the browser (issue 32): the installed script listens on a loopback
port, a real HTTP client plays the browser against the live portal (signs in with the login
form, reads the authorize page, posts Authorize with its CSRF token, follows the redirect to
the script's listener), and the script saves a token that works. Then each refusal: a foreign
state, a reused, expired or unknown code, a wrong verifier, a callback off the loopback, a
request without a sign-in, Cancel.
"""

from __future__ import annotations

import datetime as dt
import html
import re
import socket
import subprocess
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
import requests
from django.utils import timezone

from identity.models import CliGrant
from portal.models import ApiToken
from tests.cli.conftest import SCRIPT
from tests.identity import flows

pytestmark = pytest.mark.django_db(transaction=True)

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def _start_login(cli_env: dict[str, str], url: str, *extra: str) -> tuple[subprocess.Popen, str]:
    """``gpupool login --no-browser`` started in the background; the address it prints."""
    proc = subprocess.Popen(
        [str(SCRIPT), "login", "--url", url, "--no-browser", "--timeout", "60", *extra],
        env=cli_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("  http"):
            return proc, line.strip()
    proc.kill()
    raise AssertionError(f"no address printed; exit {proc.wait()}")


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def _form(text: str) -> dict[str, str]:
    """The hidden fields and CSRF token of the page's form."""
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', text))
    fields["csrfmiddlewaretoken"] = CSRF.search(text).group(1)  # type: ignore[union-attr]
    return fields


def _browser_signs_in(browser: requests.Session, authorize_url: str, username: str) -> Any:
    """The browser opens the address, is sent to the login form first, signs in there, and
    lands back on the authorize page: that page's response."""
    login_page = browser.get(authorize_url)
    assert urlparse(login_page.url).path == "/login/", login_page.url
    assert parse_qs(urlparse(login_page.url).query)["next"][0].startswith("/cli/authorize/?")
    fields = {
        "csrfmiddlewaretoken": CSRF.search(login_page.text).group(1),  # type: ignore[union-attr]
        "username": username,
        "password": "pw-for-tests",
        "next": parse_qs(urlparse(login_page.url).query)["next"][0],
    }
    page = browser.post(login_page.url, data=fields)
    assert page.status_code == 200
    assert urlparse(page.url).path == "/cli/authorize/"
    return page


def test_login_through_the_browser_saves_a_token_named_for_the_host(
    live_server, bob, cli_env, gpupool, tmp_path
):
    proc, url = _start_login(cli_env, live_server.url)
    query = parse_qs(urlparse(url).query)
    assert url.startswith(f"{live_server.url}/cli/authorize/?")
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    port = int(query["port"][0])

    browser = requests.Session()
    page = _browser_signs_in(browser, url, "bob")
    host = socket.gethostname()
    assert f"Authorize the gpupool CLI on {host} as bob?" in page.text
    # the page's form may lead to the CLI's listener, and the policy says so
    assert f"form-action 'self' http://127.0.0.1:{port}" in page.headers["Content-Security-Policy"]

    answer = browser.post(
        page.url, data={**_form(page.text), "decision": "authorize"}, allow_redirects=False
    )
    assert answer.status_code == 302
    callback = answer.headers["Location"]
    assert callback.startswith(f"http://127.0.0.1:{port}/callback?")
    assert "gpp_" not in callback  # a one-time code, never the token
    last_page = browser.get(callback)
    assert "signed in" in last_page.text and "as bob" in last_page.text

    code, out, err = _finish(proc)
    assert code == 0, err
    assert "Logged in to" in out and "teams: vision" in out
    saved = (tmp_path / "config" / "gpupool" / "config").read_text()
    token = re.search(r"token = (gpp_\S+)", saved).group(1)  # type: ignore[union-attr]
    assert ApiToken.objects.get(user=bob, prefix=token[:12]).name == f"gpupool CLI on {host}"
    whoami = gpupool("whoami")
    assert whoami.returncode == 0 and "vision" in whoami.stdout
    grant = CliGrant.objects.get(user=bob)
    assert grant.used_at is not None and grant.code_digest not in callback  # stored hashed


def test_the_callback_address_pasted_on_stdin_works_too(live_server, bob, cli_env):
    """A browser on another machine cannot reach the listener: its address, pasted, can."""
    proc, url = _start_login(cli_env, live_server.url)
    browser = requests.Session()
    page = _browser_signs_in(browser, url, "bob")
    answer = browser.post(
        page.url, data={**_form(page.text), "decision": "authorize"}, allow_redirects=False
    )
    assert proc.stdin is not None
    proc.stdin.write(answer.headers["Location"] + "\n")
    proc.stdin.flush()
    code, out, err = _finish(proc)
    assert code == 0, err
    assert "teams: vision" in out


def test_cancel_in_the_browser_saves_nothing(live_server, bob, cli_env, tmp_path):
    proc, url = _start_login(cli_env, live_server.url)
    browser = requests.Session()
    page = _browser_signs_in(browser, url, "bob")
    answer = browser.post(
        page.url, data={**_form(page.text), "decision": "cancel"}, allow_redirects=False
    )
    assert "error=access_denied" in answer.headers["Location"]
    assert "code=" not in answer.headers["Location"]
    browser.get(answer.headers["Location"])
    code, _out, err = _finish(proc)
    assert code == 4 and "cancelled in the browser" in err
    assert not (tmp_path / "config" / "gpupool" / "config").exists()
    assert not CliGrant.objects.exists() and not ApiToken.objects.filter(user=bob).exists()


def test_an_answer_with_another_state_or_host_is_refused_and_the_login_goes_on(
    live_server, bob, cli_env, tmp_path
):
    """A page elsewhere that sends the browser to the listener with a code of its own (login
    CSRF), or reaches it through a name pointed at this machine (DNS rebinding), is refused
    there and then, and cannot end the login either: the real answer still signs in."""
    proc, url = _start_login(cli_env, live_server.url)
    port = parse_qs(urlparse(url).query)["port"][0]
    forged = requests.get(
        f"http://127.0.0.1:{port}/callback?" + urlencode({"code": "x" * 43, "state": "forged-1"})
    )
    assert forged.status_code == 400 and "not an answer to this login" in forged.text
    state = parse_qs(urlparse(url).query)["state"][0]
    rebound = requests.get(
        f"http://127.0.0.1:{port}/callback?" + urlencode({"code": "y" * 43, "state": state}),
        headers={"Host": f"evil.example:{port}"},
    )
    assert rebound.status_code == 400
    assert proc.poll() is None  # still waiting for the real answer
    browser = requests.Session()
    page = _browser_signs_in(browser, url, "bob")
    answer = browser.post(
        page.url, data={**_form(page.text), "decision": "authorize"}, allow_redirects=False
    )
    browser.get(answer.headers["Location"])
    code, out, err = _finish(proc)
    assert code == 0, err
    assert "teams: vision" in out
    assert (tmp_path / "config" / "gpupool" / "config").exists()


def test_no_answer_within_the_timeout_exits_4(live_server, cli_env):
    proc, _url = _start_login(cli_env, live_server.url, "--timeout", "1")
    code, _out, err = _finish(proc)
    assert code == 4 and "no answer from the browser within 1 s" in err


def test_a_pasted_token_still_works_without_a_browser(live_server, bob, gpupool):
    from tests.cli.conftest import token_for

    login = gpupool("login", "--url", live_server.url, "--token", "-", input=token_for(bob))
    assert login.returncode == 0, login.stderr
    assert "Opening" not in login.stderr and "teams: vision" in login.stdout


# ---------------------------------------------------------------------------------------------
# The portal's side, in process: the authorize page and the trade
# ---------------------------------------------------------------------------------------------
VERIFIER = "v" * 43 + "-verifier._~"


def _challenge(verifier: str = VERIFIER) -> str:
    from identity.cli_auth import challenge_of

    return challenge_of(verifier)


def _params(**override: Any) -> dict[str, Any]:
    return {
        "port": 49152,
        "state": "state-123456",
        "code_challenge": _challenge(),
        "code_challenge_method": "S256",
        "machine": "laptop",
        **override,
    }


def _code(client: Any, user: Any, **override: Any) -> str:
    """Sign ``user`` in and authorize: the code the callback carries."""
    client.force_login(user)
    response = client.post("/cli/authorize/", {**_params(**override), "decision": "authorize"})
    assert response.status_code == 302, response.content
    return parse_qs(urlparse(response["Location"]).query)["code"][0]


def _trade(client: Any, code: str, verifier: str = VERIFIER) -> Any:
    return client.post(
        "/api/v1/cli/token/",
        {"code": code, "code_verifier": verifier},
        content_type="application/json",
    )


def test_a_code_is_traded_once_and_a_second_trade_revokes_the_token(client, bob):
    code = _code(client, bob)
    first = _trade(client, code)
    assert first.status_code == 201, first.content
    assert first["Cache-Control"] == "no-store"  # RFC 6749, 5.1: a credential is never cached
    assert first.json()["name"] == "gpupool CLI on laptop" and first.json()["username"] == "bob"
    again = _trade(client, code)
    assert again.status_code == 400
    assert again.json()["extra"]["fields"] == {"code": ["This code was already used."]}
    token = ApiToken.objects.get(prefix=first.json()["prefix"])
    assert token.revoked_at is not None  # whoever replays the code may hold the token too


def test_a_new_login_from_the_same_machine_replaces_its_token(client, bob):
    first = _trade(client, _code(client, bob)).json()
    second = _trade(client, _code(client, bob)).json()
    assert ApiToken.objects.get(prefix=first["prefix"]).revoked_at is not None
    assert ApiToken.objects.get(prefix=second["prefix"]).revoked_at is None


def test_a_wrong_verifier_is_refused_and_uses_the_code_up(client, bob):
    code = _code(client, bob)
    wrong = _trade(client, code, verifier="w" * 43)
    assert wrong.status_code == 400
    assert "code_verifier" in wrong.json()["extra"]["fields"]
    assert _trade(client, code).status_code == 400  # no second guess
    assert not ApiToken.objects.filter(user=bob).exists()


def test_an_expired_code_is_refused(client, bob):
    code = _code(client, bob)
    CliGrant.objects.update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    refused = _trade(client, code)
    assert refused.status_code == 400
    assert refused.json()["extra"]["fields"] == {"code": ["This code has expired."]}
    assert not ApiToken.objects.filter(user=bob).exists()


def test_an_unknown_code_and_a_malformed_verifier_name_their_field(client, db):
    unknown = _trade(client, "no-such-code")
    assert unknown.status_code == 400 and "code" in unknown.json()["extra"]["fields"]
    malformed = _trade(client, "no-such-code", verifier="short")
    assert "code_verifier" in malformed.json()["extra"]["fields"]


def test_the_code_is_stored_only_as_a_digest_and_old_ones_go(client, bob):
    code = _code(client, bob)
    grant = CliGrant.objects.get()
    assert code not in grant.code_digest and len(grant.code_digest) == 64
    assert grant.expires_at - grant.created_at <= dt.timedelta(minutes=2, seconds=1)
    CliGrant.objects.update(expires_at=timezone.now() - dt.timedelta(days=2))
    _code(client, bob)  # the next login clears the user's codes of days ago
    assert CliGrant.objects.count() == 1 and CliGrant.objects.get().pk != grant.pk


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"host": "evil.example.org"}, "host"),
        ({"host": "10.0.0.5"}, "host"),
        ({"port": "80"}, "port"),
        ({"port": "70000"}, "port"),
        ({"port": "8080@evil.example.org"}, "port"),
        ({"code_challenge": "short"}, "code_challenge"),
        ({"code_challenge_method": "plain"}, "code_challenge_method"),
        ({"state": ""}, "state"),
    ],
    ids=["foreign host", "LAN host", "privileged port", "no such port", "port with a host",
         "short challenge", "plain PKCE", "no state"],
)  # fmt: skip
def test_a_callback_off_the_loopback_or_a_bad_request_is_refused(client, bob, override, field):
    client.force_login(bob)
    page = client.get("/cli/authorize/", _params(**override))
    assert page.status_code == 400
    assert f"<code>{field}</code>" in page.content.decode()
    posted = client.post("/cli/authorize/", {**_params(**override), "decision": "authorize"})
    assert posted.status_code == 400 and not CliGrant.objects.exists()


def test_localhost_by_name_and_non_ascii_digits_are_refused(client, bob):
    """A loopback callback is 127.0.0.1 by number (a name may resolve elsewhere), and a port
    of Unicode digits is a bad request, not a crash."""
    client.force_login(bob)
    named = client.post("/cli/authorize/", {**_params(host="localhost"), "decision": "authorize"})
    assert named.status_code == 400 and not CliGrant.objects.exists()
    page = client.get("/cli/authorize/", {**_params(), "port": "4915²"})
    assert page.status_code == 400 and "<code>port</code>" in page.content.decode()


def test_someone_not_signed_in_is_sent_to_sign_in_first(client, bob):
    page = client.get("/cli/authorize/", _params())
    assert page.status_code == 302 and page["Location"].startswith("/login/?next=/cli/authorize/")
    posted = client.post("/cli/authorize/", {**_params(), "decision": "authorize"})
    assert posted.status_code == 302 and posted["Location"].startswith("/login/")
    assert not CliGrant.objects.exists()


def test_authorize_needs_the_csrf_token(bob):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(bob)
    refused = browser.post("/cli/authorize/", {**_params(), "decision": "authorize"})
    assert refused.status_code == 403 and not CliGrant.objects.exists()


def test_an_sso_user_signs_in_with_the_provider_and_comes_back_to_authorize(client, oidc_settings):
    """Whatever the portal signs people in with: here a real OpenID provider. The login page's
    SSO button keeps the authorize page as where to come back to."""
    oidc_settings.set_user("olivia", groups=[])
    to_login = client.get("/cli/authorize/", _params())
    login_page = client.get(to_login["Location"])
    button = re.search(r'href="(/sso/testidp/login/\?next=[^"]+)"', login_page.content.decode())
    assert button, "no SSO button carrying next"
    to_provider = client.get(html.unescape(button.group(1)))
    back = flows.back_to_portal(
        client, flows.provider_round_trip(to_provider["Location"], "olivia", "idp-pw")
    )
    assert back.status_code == 302 and back["Location"].startswith("/cli/authorize/?")
    page = client.get(back["Location"])
    assert "Authorize the gpupool CLI on laptop as olivia?" in page.content.decode()
    code = parse_qs(
        urlparse(
            client.post("/cli/authorize/", {**_params(), "decision": "authorize"})["Location"]
        ).query
    )["code"][0]
    traded = _trade(client, code)
    assert traded.status_code == 201 and traded.json()["username"] == "olivia"
