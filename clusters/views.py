"""Server-rendered cluster pages: GPUs by model for everyone, connection tests for admins."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from clusters import selectors, services
from clusters.models import Cluster
from portal.access import job_get_for_user
from portal.errors import ApplicationError, NotFound


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


@login_required
def job_logs_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """One replica's log: the job page loads it as a fragment (htmx), or a page of its own."""
    try:
        job = job_get_for_user(request.user, job_id)
    except NotFound as exc:
        raise Http404("Job not found.") from exc
    try:
        replica = int(request.GET.get("replica", 0))
        tail = int(request.GET.get("tail", services.LOG_TAIL_DEFAULT))
    except ValueError:
        replica, tail = 0, services.LOG_TAIL_DEFAULT
    try:
        logs = services.job_logs(job=job, replica=replica, tail=tail)
    except ApplicationError:
        logs = services.job_logs(job=job, replica=0, tail=tail)
    context = {"job": job, "logs": logs, "replicas": range(job.replicas), "tail": tail}
    template = "clusters/_logs.html" if request.htmx else "clusters/logs.html"
    return render(request, template, context)
