"""The portal app's REST routes, mounted under ``/api/v1/`` by ``config/urls.py``: the index,
jobs, notifications, tokens, the GPU model list, teams, job templates."""

from django.urls import path, register_converter
from rest_framework.routers import SimpleRouter

from portal.api import notification_views, template_views, token_views, views


class JobId:
    """A job's id in a path: anything but a word another app's ``jobs/`` route names
    (scheduling's ``jobs/estimate/``), so these routes can be tried first."""

    regex = r"(?!estimate/)[^/]+"
    """Every route here has a ``/`` after the id, so the word is refused only before one."""

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(JobId, "job_id")

urlpatterns = [
    path("", views.ApiIndexView.as_view(), name="api-index"),
    path("jobs/", views.JobListCreateView.as_view(), name="api-jobs"),
    path("jobs/batch/", views.JobBatchView.as_view(), name="api-jobs-batch"),
    path("jobs/<job_id:job_id>/", views.JobDetailView.as_view(), name="api-job"),
    path("jobs/<job_id:job_id>/cancel/", views.JobCancelView.as_view(), name="api-job-cancel"),
    path("jobs/<job_id:job_id>/events/", views.JobEventsView.as_view(), name="api-job-events"),
    path(
        "jobs/<job_id:job_id>/attempts/", views.JobAttemptsView.as_view(), name="api-job-attempts"
    ),
    path(
        "jobs/<job_id:job_id>/attempts/<int:number>/",
        views.JobAttemptDetailView.as_view(),
        name="api-job-attempt",
    ),
    path(
        "notifications/",
        notification_views.NotificationListView.as_view(),
        name="api-notifications",
    ),
    path(
        "notifications/read/",
        notification_views.NotificationReadView.as_view(),
        name="api-notifications-read",
    ),
    path("tokens/", token_views.TokenListView.as_view(), name="api-tokens"),
    path("gpu-models/", views.GpuModelListView.as_view(), name="api-gpu-models"),
    path("teams/", views.TeamListView.as_view(), name="api-teams"),
]

_templates = SimpleRouter()
_templates.register("templates", template_views.JobTemplateViewSet, basename="api-template")
urlpatterns += _templates.urls
