"""The notifications app's pages, mounted at the root by ``config/urls.py``."""

from django.urls import path

from notifications import views

urlpatterns = [
    path(
        "settings/notifications/",
        views.notification_settings,
        name="notification-settings",
    ),
    path(
        "settings/notifications/email/",
        views.notification_email,
        name="notification-email",
    ),
    path(
        "settings/notifications/email/verify/<str:token>/",
        views.notification_email_verify,
        name="notification-email-verify",
    ),
    path("teams/<slug:team>/webhooks/", views.team_webhooks, name="team-webhooks"),
    path(
        "teams/<slug:team>/webhooks/<int:webhook_id>/delete/",
        views.team_webhook_delete,
        name="team-webhook-delete",
    ),
    path(
        "teams/<slug:team>/webhooks/<int:webhook_id>/test/",
        views.team_webhook_test,
        name="team-webhook-test",
    ),
    path(
        "teams/<slug:team>/webhooks/deliveries/<int:delivery_id>/redeliver/",
        views.team_webhook_redeliver,
        name="team-webhook-redeliver",
    ),
]
