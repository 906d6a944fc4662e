"""Cluster pages (included from ``portal.urls`` under ``/clusters/``)."""

from django.urls import path

from clusters import views

urlpatterns = [
    path("", views.cluster_list, name="cluster-list"),
    path("job-logs/<str:job_id>/", views.job_logs_view, name="job-logs"),
    path("<slug:name>/", views.cluster_detail, name="cluster-detail"),
    path("<slug:name>/test/", views.cluster_test_view, name="cluster-test"),
]
