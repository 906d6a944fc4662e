"""The identity app's REST routes, mounted under ``/api/v1/`` by ``config/urls.py``."""

from django.urls import path

from identity import cli_views

urlpatterns = [
    path("cli/token/", cli_views.CliTokenView.as_view(), name="api-cli-token"),
]
