"""The scheduling app's REST routes, mounted under ``/api/v1/`` by ``config/urls.py``: start
estimates, the model match, the queue, quotas, cohort quotas, team policies, shared pools."""

from django.urls import path

from scheduling import admin_api, api, quota_api

urlpatterns = [
    path("jobs/estimate/", api.SpecEstimateView.as_view(), name="api-jobs-estimate"),
    path("jobs/<str:job_id>/estimate/", api.JobEstimateView.as_view(), name="api-job-estimate"),
    path("gpu-models/match/", api.GpuModelMatchView.as_view(), name="api-gpu-match"),
    path(
        "gpu-models/<str:key>/shared-pool/",
        admin_api.SharedPoolView.as_view(),
        name="api-gpu-model-shared-pool",
    ),
    path("queue/", api.QueueView.as_view(), name="api-queue"),
    path("quotas/", quota_api.QuotaListView.as_view(), name="api-quotas"),
    path("quotas/preview/", quota_api.QuotaPreviewView.as_view(), name="api-quotas-preview"),
    path("quotas/<slug:team>/<str:model>/", quota_api.QuotaDetailView.as_view(), name="api-quota"),
    path("cohort-quotas/", quota_api.CohortQuotaListView.as_view(), name="api-cohort-quotas"),
    path(
        "cohort-quotas/<slug:cohort>/<str:model>/",
        quota_api.CohortQuotaDetailView.as_view(),
        name="api-cohort-quota",
    ),
    path("team-policies/", quota_api.TeamPolicyListView.as_view(), name="api-team-policies"),
    path(
        "team-policies/<slug:team>/",
        quota_api.TeamPolicyDetailView.as_view(),
        name="api-team-policy",
    ),
]
