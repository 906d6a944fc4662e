"""``gpupool login`` in a real browser (issue 32): Chromium signs in on the login form, reads
"Authorize the gpupool CLI on <host> as <user>?", clicks Authorize, and is taken to the
installed script's loopback listener, which says it is signed in. The page's policy lets its
form lead there (the ``page`` fixture fails the test on any CSP violation)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
from playwright.sync_api import expect

from portal.models import ApiToken
from tests.cli.conftest import SCRIPT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_authorize_in_chromium_logs_the_cli_in(page, live_server, bob, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
    env.update({"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")})
    login = subprocess.Popen(
        [str(SCRIPT), "login", "--url", live_server.url, "--no-browser", "--timeout", "60"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert login.stderr is not None
    url = next(line.strip() for line in login.stderr if line.startswith("  http"))
    p = page.page
    try:
        p.goto(url)
        p.wait_for_url(f"{live_server.url}/login/**")
        p.fill("#id_username", "bob")
        p.fill("#id_password", "pw-for-tests")
        p.click("main button[type=submit]")
        p.wait_for_url(f"{live_server.url}/cli/authorize/**")
        expect(p.get_by_role("heading", level=1)).to_have_text(
            f"Authorize the gpupool CLI on {socket.gethostname()} as bob?"
        )
        p.get_by_role("button", name="Authorize").click()
        p.wait_for_url("http://127.0.0.1:*/callback?**")
        expect(p.locator("body")).to_contain_text("signed in")
        out, err = login.communicate(timeout=30)
    finally:
        if login.poll() is None:
            login.kill()
    assert login.returncode == 0, err
    assert "teams: vision" in out
    assert ApiToken.objects.filter(user=bob, name__startswith="gpupool CLI on ").count() == 1
