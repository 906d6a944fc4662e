"""The scheduling app's pages, mounted at the root by ``config/urls.py``."""

from django.urls import path

from scheduling import admin_views, queue_views, quota_views, submit_views

urlpatterns = [
    path("queue/", queue_views.queue_page, name="queue"),
    path("quotas/", quota_views.quota_page, name="quotas"),
    path("jobs/new/match/", submit_views.match_preview, name="match-preview"),
    path("jobs/new/estimate/", submit_views.estimate_preview, name="estimate-preview"),
    path(
        "jobs/<str:job_id>/estimate/",
        submit_views.job_estimate_alternatives,
        name="job-estimate-alternatives",
    ),
    path("quotas/cohort/", quota_views.cohort_quota_save, name="cohort-quota"),
    path("quotas/check/", quota_views.quota_check, name="quota-check"),
    path("quotas/preview/", quota_views.quota_preview, name="quota-preview"),
    path("quotas/teams/", quota_views.team_policies_save, name="team-policies"),
    path("catalog/", admin_views.catalog_page, name="catalog"),
    path("catalog/<str:key>/", admin_views.gpu_model_edit, name="gpu-model-edit"),
    path("catalog/<str:key>/share/", admin_views.shared_pool_page, name="shared-pool"),
    path("policies/", admin_views.team_policy_list, name="team-policy-list"),
    path("policies/<slug:slug>/", admin_views.team_policy_edit, name="team-policy-edit"),
]
