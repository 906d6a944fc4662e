"""The identity app's pages, mounted at the root by ``config/urls.py``."""

from django.urls import path

from identity import cli_views, team_views, unlock, views

urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.logout_view, name="logout"),
    path("login/unlock/", unlock.unlock_request, name="login-unlock"),
    path(
        "login/unlock/<str:uidb64>/<str:token>/", unlock.unlock_confirm, name="login-unlock-confirm"
    ),
    path("sso/<slug:name>/login/", views.oidc_login, name="oidc-login"),
    path("sso/<slug:name>/callback/", views.oidc_callback, name="oidc-callback"),
    path("cli/authorize/", cli_views.cli_authorize, name="cli-authorize"),
    path("teams/", team_views.team_list, name="team-list"),
    path("teams/<slug:slug>/members/", team_views.team_members, name="team-members"),
    path("invitations/<str:token>/", team_views.invitation_open, name="invitation-accept"),
]
