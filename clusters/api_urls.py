"""The clusters app's REST routes, mounted under ``/api/v1/`` by ``config/urls.py``."""

from django.urls import path, re_path

from clusters import api

urlpatterns = [
    path("clusters/", api.ClusterListView.as_view(), name="api-clusters"),
    path("clusters/<slug:name>/", api.ClusterDetailView.as_view(), name="api-cluster"),
    path("clusters/<slug:name>/test/", api.ClusterTestView.as_view(), name="api-cluster-test"),
    path("clusters/<slug:name>/sync/", api.ClusterSyncView.as_view(), name="api-cluster-sync"),
    path("jobs/<str:job_id>/logs/", api.JobLogsView.as_view(), name="api-job-logs"),
    re_path(  # any path after proxy/, the empty one (the server's root) too
        r"^jobs/(?P<job_id>[^/]+)/proxy/(?P<path>.*)$",
        api.JobProxyView.as_view(),
        name="api-job-proxy",
    ),
]
