"""The portal app's pages, mounted at the root by ``config/urls.py``."""

from django.urls import path

from portal.web import notification_views, template_views, views

urlpatterns = [
    # login/ and logout/ live in identity/urls.py (the provider buttons, end-session).
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/cancel/", views.job_bulk_cancel, name="job-bulk-cancel"),
    path("jobs/new/", views.job_submit_view, name="job-submit"),
    path("jobs/<str:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<str:job_id>/cancel/", views.job_cancel_view, name="job-cancel"),
    path("jobs/<str:job_id>/attempts/<int:number>/", views.job_attempt_view, name="job-attempt"),
    path("templates/", template_views.template_list, name="template-list"),
    path("templates/new/", template_views.template_new, name="template-new"),
    path("templates/<int:template_id>/", template_views.template_edit, name="template-edit"),
    path(
        "templates/<int:template_id>/delete/",
        template_views.template_delete_view,
        name="template-delete",
    ),
    path("notifications/", notification_views.notification_list, name="notification-list"),
    path("notifications/bell/", notification_views.notification_bell, name="notification-bell"),
    path(
        "notifications/recent/",
        notification_views.notification_recent,
        name="notification-recent",
    ),
    path(
        "notifications/read/",
        notification_views.notification_read_all,
        name="notification-read-all",
    ),
    path(
        "notifications/<int:notification_id>/",
        notification_views.notification_open,
        name="notification-open",
    ),
    path("tokens/", views.token_list, name="token-list"),
    path("tokens/<int:token_id>/revoke/", views.token_revoke, name="token-revoke"),
]
