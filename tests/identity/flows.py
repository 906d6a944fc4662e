"""The browser's part of an OpenID Connect sign-in, played with ``requests`` against the real
provider and Django's test client against the portal (the Chromium test plays it for real)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests


def provider_round_trip(auth_url: str, login: str, password: str) -> str:
    """Follow the provider from its authorization URL through its login form (and the consent
    it gives itself) to the redirect back to the portal; returns that URL."""
    session = requests.Session()
    response = session.get(auth_url, allow_redirects=False, timeout=10)
    issuer_host = urlsplit(auth_url).netloc
    for _ in range(12):
        if response.is_redirect:
            target = urljoin(response.url, response.headers["Location"])
            if urlsplit(target).netloc != issuer_host:
                return target
            response = session.get(target, allow_redirects=False, timeout=10)
            continue
        form = re.search(r'action="([^"]+/login)"', response.text)
        assert response.status_code == 200 and form, (response.status_code, response.text[:500])
        response = session.post(
            urljoin(response.url, form.group(1)),
            data={"login": login, "password": password},
            allow_redirects=False,
            timeout=10,
        )
    raise AssertionError("the provider never sent the browser back")


def start(client: Any, provider: str = "testidp") -> str:
    response = client.get(f"/sso/{provider}/login/")
    assert response.status_code == 302, response.content[:300]
    return response["Location"]


def back_to_portal(client: Any, redirect: str) -> Any:
    parts = urlsplit(redirect)
    return client.get(f"{parts.path}?{parts.query}")


def sign_in(client: Any, login: str, password: str = "idp-pw", provider: str = "testidp") -> Any:
    """The whole flow: the portal's redirect, the provider, the portal's callback."""
    return back_to_portal(client, provider_round_trip(start(client, provider), login, password))
