"""The dashboards app's pages, mounted at the root by ``config/urls.py``."""

from django.urls import path

from dashboards import views

urlpatterns = [
    path("", views.pool_overview_page, name="home"),  # the pool overview is the home page
    path("pool/", views.pool_overview_page, name="pool"),
    path("pool/clusters/", views.cluster_page, name="pool-clusters"),
    path("pool/estimates/", views.estimate_calibration_page, name="estimate-calibration"),
    path("fair-share/", views.fair_share_page, name="fair-share"),
    path("usage/", views.usage_page, name="usage"),
    path("usage/export.csv", views.usage_csv, name="usage-csv"),
    path("metrics", views.metrics_view, name="metrics"),
]
