from django.urls import include, path, re_path
from rest_framework.routers import SimpleRouter

from clusters import api as clusters_api
from portal.api import notification_views, template_views, token_views, views
from scheduling import admin_api as scheduling_admin_api
from scheduling import api as scheduling_api

urlpatterns = [
    path("", views.ApiIndexView.as_view(), name="api-index"),
    path("jobs/", views.JobListCreateView.as_view(), name="api-jobs"),
    path("jobs/batch/", views.JobBatchView.as_view(), name="api-jobs-batch"),
    path("jobs/estimate/", scheduling_api.SpecEstimateView.as_view(), name="api-jobs-estimate"),
    path("jobs/<str:job_id>/", views.JobDetailView.as_view(), name="api-job"),
    path(
        "jobs/<str:job_id>/estimate/",
        scheduling_api.JobEstimateView.as_view(),
        name="api-job-estimate",
    ),
    path("jobs/<str:job_id>/cancel/", views.JobCancelView.as_view(), name="api-job-cancel"),
    path("jobs/<str:job_id>/events/", views.JobEventsView.as_view(), name="api-job-events"),
    path("jobs/<str:job_id>/logs/", clusters_api.JobLogsView.as_view(), name="api-job-logs"),
    re_path(  # any path after proxy/, the empty one (the server's root) too
        r"^jobs/(?P<job_id>[^/]+)/proxy/(?P<path>.*)$",
        clusters_api.JobProxyView.as_view(),
        name="api-job-proxy",
    ),
    path("jobs/<str:job_id>/attempts/", views.JobAttemptsView.as_view(), name="api-job-attempts"),
    path(
        "jobs/<str:job_id>/attempts/<int:number>/",
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
    path("clusters/", include("clusters.api_urls")),
    path("gpu-models/", views.GpuModelListView.as_view(), name="api-gpu-models"),
    path("gpu-models/match/", scheduling_api.GpuModelMatchView.as_view(), name="api-gpu-match"),
    path(
        "gpu-models/<str:key>/shared-pool/",
        scheduling_admin_api.SharedPoolView.as_view(),
        name="api-gpu-model-shared-pool",
    ),
    path("teams/", views.TeamListView.as_view(), name="api-teams"),
    path("queue/", scheduling_api.QueueView.as_view(), name="api-queue"),
    path("quotas/", scheduling_api.QuotaListView.as_view(), name="api-quotas"),
    path("quotas/preview/", scheduling_api.QuotaPreviewView.as_view(), name="api-quotas-preview"),
    path(
        "quotas/<slug:team>/<str:model>/",
        scheduling_api.QuotaDetailView.as_view(),
        name="api-quota",
    ),
    path(
        "cohort-quotas/",
        scheduling_api.CohortQuotaListView.as_view(),
        name="api-cohort-quotas",
    ),
    path(
        "cohort-quotas/<slug:cohort>/<str:model>/",
        scheduling_api.CohortQuotaDetailView.as_view(),
        name="api-cohort-quota",
    ),
    path(
        "team-policies/",
        scheduling_api.TeamPolicyListView.as_view(),
        name="api-team-policies",
    ),
    path(
        "team-policies/<slug:team>/",
        scheduling_api.TeamPolicyDetailView.as_view(),
        name="api-team-policy",
    ),
    path("", include("dashboards.api_urls")),
    path("", include("notifications.api_urls")),
    path("", include("identity.api_urls")),
]

_templates = SimpleRouter()
_templates.register("templates", template_views.JobTemplateViewSet, basename="api-template")
urlpatterns += _templates.urls
