from django.urls import path

from scheduling import views

urlpatterns = [
    path("queue/", views.queue_page, name="queue"),
    path("quotas/", views.quota_page, name="quotas"),
    path("jobs/new/match/", views.match_preview, name="match-preview"),
    path("quotas/cohort/", views.cohort_quota_save, name="cohort-quota"),
    path("quotas/<slug:team>/<str:model>/", views.quota_cell_save, name="quota-cell"),
]
