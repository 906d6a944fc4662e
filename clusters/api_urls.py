"""``/api/v1/clusters/…`` (included from ``portal.api.urls``)."""

from django.urls import path

from clusters import api

urlpatterns = [
    path("", api.ClusterListView.as_view(), name="api-clusters"),
    path("<slug:name>/", api.ClusterDetailView.as_view(), name="api-cluster"),
    path("<slug:name>/test/", api.ClusterTestView.as_view(), name="api-cluster-test"),
    path("<slug:name>/sync/", api.ClusterSyncView.as_view(), name="api-cluster-sync"),
]
