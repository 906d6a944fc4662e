"""Cluster pages (included from ``config.urls`` under ``/clusters/``)."""

from django.urls import path

from clusters import views

urlpatterns = [
    path("", views.cluster_list, name="cluster-list"),
    path("register/", views.cluster_register_view, name="cluster-register"),
    path("job-logs/<str:job_id>/", views.job_logs_view, name="job-logs"),
    path("job-logs/<str:job_id>/download/", views.job_log_download_view, name="job-log-download"),
    path("<slug:name>/", views.cluster_detail, name="cluster-detail"),
    path("<slug:name>/test/", views.cluster_test_view, name="cluster-test"),
    path("<slug:name>/doctor/", views.cluster_doctor_view, name="cluster-doctor"),
    path("<slug:name>/state/<slug:state>/", views.cluster_state_view, name="cluster-state"),
    path("<slug:name>/delete/", views.cluster_delete_view, name="cluster-delete"),
]
