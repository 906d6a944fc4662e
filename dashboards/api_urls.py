"""The dashboards app's REST routes, mounted under ``/api/v1/`` by ``config/urls.py``."""

from django.urls import path

from dashboards import api

urlpatterns = [
    path("pool/", api.PoolView.as_view(), name="api-pool"),
    path("pool/history/", api.PoolHistoryView.as_view(), name="api-pool-history"),
    path("teams/<slug:slug>/usage/", api.TeamUsageView.as_view(), name="api-team-usage"),
    path("queue/stats/", api.QueueStatsView.as_view(), name="api-queue-stats"),
    path("fair-share/", api.FairShareView.as_view(), name="api-fair-share"),
    path(
        "estimates/calibration/",
        api.EstimateCalibrationView.as_view(),
        name="api-estimate-calibration",
    ),
]
