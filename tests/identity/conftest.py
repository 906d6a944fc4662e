"""Fixtures: one real OpenID provider and one real slapd per test session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.identity.servers import OidcIdp, Slapd, oidc_idp_running, slapd_running


@pytest.fixture(scope="session")
def oidc_idp(tmp_path_factory: Any, live_server: Any) -> Iterator[OidcIdp]:
    """The provider, with a client that may come back to the test client and the live server."""
    with oidc_idp_running(
        tmp_path_factory.mktemp("idp"), ["http://testserver", live_server.url]
    ) as idp:
        yield idp


@pytest.fixture
def oidc_settings(settings: Any, oidc_idp: OidcIdp) -> OidcIdp:
    settings.GPUPOOL_OIDC_PROVIDERS = [oidc_idp.settings_entry()]
    return oidc_idp


@pytest.fixture(scope="session")
def slapd(tmp_path_factory: Any) -> Iterator[Slapd]:
    with slapd_running(tmp_path_factory.mktemp("slapd")) as directory:
        yield directory


@pytest.fixture
def ldap_settings(settings: Any, slapd: Slapd) -> Slapd:
    for key, value in slapd.settings().items():
        setattr(settings, key, value)
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "identity.backends.PortalLDAPBackend",
    ]
    return slapd
