"""Server-rendered cluster pages: GPUs by model for everyone, connection tests for admins."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from clusters import selectors, services
from clusters.models import Cluster


def _cluster_or_404(name: str) -> Cluster:
    cluster = selectors.cluster_get(name=name)
    if cluster is None:
        raise Http404("No such cluster.")
    return cluster


@login_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    rows = selectors.clusters_with_gpu_summary(request.user)
    return render(request, "clusters/list.html", {"rows": rows})


@login_required
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    cluster = _cluster_or_404(name)
    return render(
        request,
        "clusters/detail.html",
        {"cluster": cluster, "models": selectors.cluster_capacity(cluster)},
    )


@staff_member_required
@require_http_methods(["GET", "POST"])
def cluster_test_view(request: HttpRequest, name: str) -> HttpResponse:
    """GET shows the last result; POST connects now and shows what it found."""
    cluster = _cluster_or_404(name)
    report = services.cluster_test(cluster=cluster) if request.method == "POST" else None
    if report is not None:
        cluster.refresh_from_db()
    return render(request, "clusters/test.html", {"cluster": cluster, "report": report})
