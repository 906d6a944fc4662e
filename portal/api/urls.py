from django.urls import include, path

from clusters import api as clusters_api
from portal.api import views
from scheduling import api as scheduling_api

urlpatterns = [
    path("jobs/", views.JobListCreateView.as_view(), name="api-jobs"),
    path("jobs/batch/", views.JobBatchView.as_view(), name="api-jobs-batch"),
    path("jobs/<str:job_id>/", views.JobDetailView.as_view(), name="api-job"),
    path("jobs/<str:job_id>/cancel/", views.JobCancelView.as_view(), name="api-job-cancel"),
    path("jobs/<str:job_id>/events/", views.JobEventsView.as_view(), name="api-job-events"),
    path("jobs/<str:job_id>/logs/", clusters_api.JobLogsView.as_view(), name="api-job-logs"),
    path("clusters/", include("clusters.api_urls")),
    path("gpu-models/", views.GpuModelListView.as_view(), name="api-gpu-models"),
    path("gpu-models/match/", scheduling_api.GpuModelMatchView.as_view(), name="api-gpu-match"),
    path("teams/", views.TeamListView.as_view(), name="api-teams"),
    path("queue/", scheduling_api.QueueView.as_view(), name="api-queue"),
    path("quotas/", scheduling_api.QuotaListView.as_view(), name="api-quotas"),
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
    path("", include("dashboards.api_urls")),
]
