"""The notifications app's REST routes, mounted under ``/api/v1/`` by ``config/urls.py``."""

from django.urls import path

from notifications import api

urlpatterns = [
    path(
        "notification-preferences/",
        api.PreferencesView.as_view(),
        name="api-notification-preferences",
    ),
    path(
        "notification-deliveries/",
        api.DeliveryListView.as_view(),
        name="api-notification-deliveries",
    ),
    path("teams/<slug:team>/webhooks/", api.TeamWebhookListView.as_view(), name="api-webhooks"),
    path(
        "teams/<slug:team>/webhooks/<int:webhook_id>/",
        api.TeamWebhookDetailView.as_view(),
        name="api-webhook",
    ),
]
