"""identity's REST, mounted under /api/v1/ by portal/api/urls.py."""

from django.urls import path

from identity import cli_views

urlpatterns = [
    path("cli/token/", cli_views.CliTokenView.as_view(), name="api-cli-token"),
]
