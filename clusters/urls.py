"""The clusters app's pages, mounted at the root by ``config/urls.py``."""

from django.urls import path

from clusters import views

urlpatterns = [
    path("clusters/", views.cluster_list, name="cluster-list"),
    path("clusters/register/", views.cluster_register_view, name="cluster-register"),
    path("clusters/job-logs/<str:job_id>/", views.job_logs_view, name="job-logs"),
    path(
        "clusters/job-logs/<str:job_id>/download/",
        views.job_log_download_view,
        name="job-log-download",
    ),
    path("clusters/<slug:name>/", views.cluster_detail, name="cluster-detail"),
    path("clusters/<slug:name>/test/", views.cluster_test_view, name="cluster-test"),
    path("clusters/<slug:name>/doctor/", views.cluster_doctor_view, name="cluster-doctor"),
    path(
        "clusters/<slug:name>/state/<slug:state>/", views.cluster_state_view, name="cluster-state"
    ),
    path("clusters/<slug:name>/delete/", views.cluster_delete_view, name="cluster-delete"),
]
