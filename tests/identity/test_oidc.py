"""OpenID Connect sign-in against a real provider (oidc-provider under Node): the account made
at the first sign-in, the group rules at each one, state / nonce / PKCE / signature / expiry
checks, disabled accounts, and logout through the provider's end-session endpoint."""

from __future__ import annotations

import base64
import json
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from authlib.oidc.core import CodeIDToken
from django.contrib.auth import get_user_model
from joserfc.errors import BadSignatureError, ExpiredTokenError, InvalidClaimError

from identity.accounts import disable_account
from identity.models import ExternalIdentity, GroupRule, MembershipAudit, ProviderMembership
from identity.providers import client_for, provider_named
from identity.views import SESSION_OIDC
from portal.models import Membership, Role
from portal.tokens import api_token_create
from tests.identity.flows import back_to_portal, provider_round_trip, sign_in, start
from tests.identity.servers import oidc_idp_running

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.fixture
def rules(vision, language):
    GroupRule.objects.create(pattern="gpu-vision-*", team=vision, role="member")
    GroupRule.objects.create(pattern="gpu-vision-admins", team=vision, role="admin")
    GroupRule.objects.create(pattern="gpu-language-readers", team=language, role="viewer")
    GroupRule.objects.create(pattern="gpu-platform-admins", role="platform_admin")


def _role(username: str, team) -> str | None:
    m = Membership.objects.filter(user__username=username, team=team).first()
    return m.role if m else None


def test_first_sign_in_creates_the_account_and_applies_the_rules(
    client, oidc_settings, rules, vision, language
):
    oidc_settings.set_user("olivia", groups=["gpu-vision-users", "unrelated"])
    response = sign_in(client, "olivia")
    assert response.status_code == 302 and response["Location"] == "/"

    user = User.objects.get(username="olivia")
    assert user.email == "olivia@example.org" and not user.has_usable_password()
    identity = ExternalIdentity.objects.get(user=user)
    assert identity.provider == "oidc:testidp" and identity.groups == [
        "gpu-vision-users",
        "unrelated",
    ]
    membership = Membership.objects.get(user=user)
    assert (membership.team, membership.role) == (vision, Role.MEMBER)
    assert ProviderMembership.objects.get(membership=membership).groups == ["gpu-vision-users"]
    assert client.get("/jobs/").status_code == 200  # signed in


def test_group_changes_between_sign_ins_change_provider_memberships_only(
    client, oidc_settings, rules, vision, language
):
    oidc_settings.set_user("pat", groups=["gpu-vision-users"])
    sign_in(client, "pat")
    user = User.objects.get(username="pat")
    Membership.objects.create(user=user, team=language, role=Role.ADMIN)  # made by hand

    oidc_settings.set_user("pat", groups=["gpu-vision-admins", "gpu-platform-admins"])
    client.logout()
    sign_in(client, "pat")
    user.refresh_from_db()
    assert _role("pat", vision) == Role.ADMIN and user.is_staff
    assert _role("pat", language) == Role.ADMIN  # hand-made: the viewer rule does not touch it

    oidc_settings.set_user("pat", groups=["gpu-language-readers"])
    client.logout()
    sign_in(client, "pat")
    user.refresh_from_db()
    assert _role("pat", vision) is None and not user.is_staff
    assert _role("pat", language) == Role.ADMIN
    actions = list(
        MembershipAudit.objects.filter(user=user).order_by("id").values_list("action", flat=True)
    )
    assert actions == [
        "member-added",
        "role-changed",
        "platform-admin-granted",
        "member-removed",
        "platform-admin-removed",
    ]


def test_a_hand_given_staff_flag_is_not_taken_by_the_rules(client, oidc_settings, rules):
    oidc_settings.set_user("quinn", groups=[])
    sign_in(client, "quinn")
    User.objects.filter(username="quinn").update(is_staff=True)  # a platform admin by hand
    client.logout()
    sign_in(client, "quinn")
    assert User.objects.get(username="quinn").is_staff


def test_an_external_sign_in_never_takes_over_a_local_account(client, oidc_settings, alice):
    oidc_settings.set_user("alice", groups=[])
    sign_in(client, "alice")
    identity = ExternalIdentity.objects.get(subject="alice")
    assert identity.user != alice and identity.user.username == "alice-2"


def test_a_wrong_state_is_refused(client, oidc_settings):
    oidc_settings.set_user("rita", groups=[])
    redirect = provider_round_trip(start(client), "rita", "idp-pw")
    forged = redirect.replace("state=", "state=x")
    response = back_to_portal(client, forged)
    assert response.status_code == 400
    assert not User.objects.filter(username="rita").exists()


def _state_key(client) -> str:
    return next(k for k, _ in client.session.items() if k.startswith("_state_testidp_"))


def test_a_wrong_nonce_is_refused(client, oidc_settings):
    oidc_settings.set_user("sam", groups=[])
    redirect = provider_round_trip(start(client), "sam", "idp-pw")
    session = client.session
    key = _state_key(client)
    stored = session[key]
    stored["data"]["nonce"] = "not-the-nonce-sent"
    session[key] = stored
    session.save()
    response = back_to_portal(client, redirect)
    assert response.status_code == 400
    assert b"the ID token did not validate" in response.content
    assert not User.objects.filter(username="sam").exists()


def test_a_wrong_pkce_verifier_is_refused_by_the_provider(client, oidc_settings):
    oidc_settings.set_user("tess", groups=[])
    redirect = provider_round_trip(start(client), "tess", "idp-pw")
    session = client.session
    key = _state_key(client)
    stored = session[key]
    stored["data"]["code_verifier"] = "x" * 64
    session[key] = stored
    session.save()
    response = back_to_portal(client, redirect)
    assert response.status_code == 400
    assert not User.objects.filter(username="tess").exists()


def _payload(id_token: str) -> dict:
    part = id_token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def test_a_tampered_id_token_fails_its_signature(client, oidc_settings):
    oidc_settings.set_user("uma", groups=["gpu-vision-users"])
    sign_in(client, "uma")
    id_token = client.session[SESSION_OIDC]["id_token"]
    nonce = _payload(id_token)["nonce"]
    app = client_for(provider_named("testidp"))
    # The genuine token validates …
    assert app.parse_id_token({"id_token": id_token}, nonce, claims_cls=CodeIDToken)["sub"]
    # … one with its groups widened does not.
    header, _, signature = id_token.split(".")
    claims = _payload(id_token) | {"groups": ["gpu-platform-admins"]}
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(BadSignatureError):
        app.parse_id_token(
            {"id_token": f"{header}.{body}.{signature}"}, nonce, claims_cls=CodeIDToken
        )
    with pytest.raises(InvalidClaimError):
        app.parse_id_token({"id_token": id_token}, "another-nonce", claims_cls=CodeIDToken)


def test_an_expired_id_token_is_refused(client, settings, tmp_path):
    with oidc_idp_running(tmp_path, ["http://testserver"], id_token_ttl=1) as short:
        settings.GPUPOOL_OIDC_PROVIDERS = [short.settings_entry("shortidp")]
        short.set_user("vera", groups=[])
        sign_in(client, "vera", provider="shortidp")
        id_token = client.session[SESSION_OIDC]["id_token"]
        time.sleep(2.2)
        app = client_for(provider_named("shortidp"))
        with pytest.raises(ExpiredTokenError):
            app.parse_id_token(
                {"id_token": id_token},
                _payload(id_token)["nonce"],
                claims_cls=CodeIDToken,
                leeway=0,
            )


def test_a_disabled_account_loses_session_tokens_and_sign_in(client, oidc_settings, rules):
    oidc_settings.set_user("wes", groups=["gpu-vision-users"])
    sign_in(client, "wes")
    user = User.objects.get(username="wes")
    _, raw = api_token_create(user=user, name="ci")
    assert client.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200

    assert disable_account(user)  # as the provider's sync does
    assert client.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401
    assert client.get("/jobs/").status_code == 302  # the session is gone: to the login page
    response = sign_in(client, "wes")
    assert response.status_code == 400 and b"disabled" in response.content
    assert not User.objects.get(pk=user.pk).is_active


def test_logout_ends_the_provider_session_too(client, oidc_settings, oidc_idp):
    oidc_settings.set_user("xena", groups=[])
    sign_in(client, "xena")
    id_token = client.session[SESSION_OIDC]["id_token"]
    response = client.post("/logout/")
    assert response.status_code == 302
    target = urlsplit(response["Location"])
    assert f"{target.scheme}://{target.netloc}" == oidc_idp.issuer
    assert target.path == "/session/end"
    query = parse_qs(target.query)
    assert query["id_token_hint"] == [id_token]
    assert query["post_logout_redirect_uri"] == ["http://testserver/login/"]
    assert client.get("/jobs/").status_code == 302


def test_the_login_page_lists_providers_and_never_their_secrets(client, oidc_settings, caplog):
    page = client.get("/login/").content.decode()
    assert "Sign in with Test IdP" in page and "/sso/testidp/login/" in page
    assert oidc_settings.client_secret not in page
    forged = client.get("/sso/testidp/callback/?code=abc&state=nope")
    assert forged.status_code == 400
    assert oidc_settings.client_secret not in forged.content.decode()
    assert oidc_settings.client_secret not in caplog.text
    assert client.get("/sso/nosuch/login/").status_code == 404


def test_without_providers_the_login_page_has_only_the_password_form(client, alice):
    page = client.get("/login/").content.decode()
    assert "Sign in with" not in page
    response = client.post("/login/", {"username": "alice", "password": "pw-for-tests"})
    assert response.status_code == 302


def test_debug_pages_mask_the_client_secret(oidc_settings):
    from django.views.debug import SafeExceptionReporterFilter

    safe = SafeExceptionReporterFilter().get_safe_settings()
    assert oidc_settings.client_secret not in str(safe["GPUPOOL_OIDC_PROVIDERS"])
    assert oidc_settings.client_id in str(safe["GPUPOOL_OIDC_PROVIDERS"])
