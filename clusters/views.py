"""Server-rendered cluster pages: GPUs by model for everyone, connection tests for admins."""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from clusters import selectors, tasks
from clusters.checkup import cluster_checkup
from clusters.connection_test import cluster_test
from clusters.forms import ClusterRegisterForm
from clusters.logs import (
    LOG_ATTEMPTS,
    LOG_TAIL_DEFAULT,
    LOG_TAIL_MAX,
    job_log_download,
    job_logs,
    replica_restarted,
)
from clusters.models import Cluster, ClusterFinding, ClusterState, FindingSeverity
from clusters.registration import (
    cluster_credentials_from_input,
    cluster_delete,
    cluster_register,
    cluster_settings_check,
    cluster_state_set,
)
from portal.access import job_get_for_user
from portal.errors import ApplicationError, NotFound
from scheduling.drain_impact import cluster_drain_impact
from scheduling.preview import ClusterProposal, Proposal, preview_changes


def _cluster_or_404(name: str) -> Cluster:
    cluster = selectors.cluster_get(name=name)
    if cluster is None:
        raise Http404("No such cluster.")
    return cluster


@login_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    rows = selectors.clusters_with_gpu_summary(request.user)
    # What the cluster doctor found, per cluster and severity, in one query: the list says
    # "2 errors, 1 warning" and the cluster page explains them.
    counts: dict[int, dict[str, int]] = {}
    for cluster_id, severity, n in (
        ClusterFinding.objects.filter(cluster__in=[c for c, _ in rows])
        .values_list("cluster_id", "severity")
        .annotate(n=Count("pk"))
    ):
        counts.setdefault(cluster_id, {})[severity] = n
    for cluster, _ in rows:
        found = counts.get(cluster.pk, {})
        cluster.doctor_summary = ", ".join(  # type: ignore[attr-defined]
            f"{found[s]} {s}{'' if found[s] == 1 else 's'}"
            for s in (FindingSeverity.ERROR, FindingSeverity.WARNING)
            if found.get(s)
        )
        cluster.doctor_has_errors = bool(found.get(FindingSeverity.ERROR))  # type: ignore[attr-defined]
    return render(request, "clusters/list.html", {"rows": rows})


@login_required
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    cluster = _cluster_or_404(name)
    return render(
        request,
        "clusters/detail.html",
        {
            "cluster": cluster,
            "models": selectors.cluster_capacity(cluster),
            "states": ClusterState.choices,
            "findings": list(cluster.findings.all()),
        },
    )


@staff_member_required
@require_POST
def cluster_doctor_view(request: HttpRequest, name: str) -> HttpResponse:
    """ "Check now" on the cluster page: run the cluster doctor at once (it also runs on every
    inventory sync) and show the page again with what it found."""
    cluster = _cluster_or_404(name)
    result = cluster_checkup(cluster=cluster)
    if result.ok:
        messages.success(request, f"Cluster doctor: {result.message}.")
    else:
        messages.error(request, f"Cluster doctor: {result.message}")
    return redirect(f"{reverse('cluster-detail', args=[cluster.name])}#doctor")


# Where each error of the registration services belongs on the form.
_REGISTER_FIELDS = {
    "name": "name",
    "api_url": "api_url",
    "token": "token",
    "ca_pem": "ca_pem",
    "namespace": "namespace",
    "prometheus_url": "prometheus_url",
    "gpu_label": "gpu_label",
    "namespace_per_team": "namespace_per_team",
    "state": "enable",
}


@staff_member_required
@sensitive_post_parameters("token", "kubeconfig_text")
@sensitive_variables()
@require_http_methods(["GET", "POST"])
def cluster_register_view(request: HttpRequest) -> HttpResponse:
    """Register a cluster in the portal's own page. A failed save shows every field again as
    typed (the token included); only a chosen kubeconfig file cannot come back, and the page
    says so."""
    form = ClusterRegisterForm(request.POST or None, request.FILES or None)
    file_lost = False
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        upload = data.get("kubeconfig_file")
        kubeconfig = upload.read() if upload else data.get("kubeconfig_text") or None
        options: dict[str, Any] = {
            k: data[k] for k in ("namespace", "gpu_label", "prometheus_url") if data.get(k)
        }
        options["namespace_per_team"] = data["namespace_per_team"]
        options["state"] = ClusterState.ENABLED if data["enable"] else ClusterState.DISABLED
        # The name and options, then the credentials: both kinds of problem in one answer.
        problems: list[ApplicationError] = []
        credentials = None
        try:
            cluster_settings_check(name=data["name"], **options)
        except ApplicationError as exc:
            problems.append(exc)
        try:
            credentials = cluster_credentials_from_input(
                kubeconfig=kubeconfig,
                api_url=data.get("api_url") or None,
                token=data.get("token") or None,
                ca_pem=data.get("ca_pem") or None,
            )
        except ApplicationError as exc:
            problems.append(exc)
        cluster = None
        if credentials is not None and not problems:
            try:
                cluster, _ = cluster_register(name=data["name"], credentials=credentials, **options)
            except ApplicationError as exc:
                problems.append(exc)
        for exc in problems:
            form.add_error(None, exc.message)  # the sentence; each field gets its own part
            for key, field_problems in exc.fields.items():
                if key == "kubeconfig":
                    key = "kubeconfig_file" if upload else "kubeconfig_text"
                field = _REGISTER_FIELDS.get(key, key)
                form.add_error(field if field in form.fields else None, field_problems)
        if cluster is not None:
            # The inventory and the cluster doctor look at it in the background at once.
            transaction.on_commit(functools.partial(tasks.sync_inventory.delay, cluster.pk))
            messages.success(
                request,
                f"Registered {cluster.name} ({cluster.get_state_display().lower()}). "
                "Test its connection before enabling it.",
            )
            return redirect("cluster-test", name=cluster.name)
    if request.method == "POST":
        file_lost = bool(request.FILES.get("kubeconfig_file"))
    return render(
        request,
        "clusters/register.html",
        {"form": form, "file_lost": file_lost},
        status=400 if request.method == "POST" else 200,
    )


@staff_member_required
@require_http_methods(["GET", "POST"])
def cluster_state_view(request: HttpRequest, name: str, state: str) -> HttpResponse:
    """Enable, drain or disable. Draining and disabling ask first, with what they touch."""
    cluster = _cluster_or_404(name)
    if state not in ClusterState.values:
        raise Http404("No such state.")
    if request.method == "POST":
        cluster_state_set(cluster=cluster, state=state)
        messages.success(request, f"{cluster.name} is now {cluster.get_state_display().lower()}.")
        return redirect("cluster-detail", name=cluster.name)
    impact = cluster_drain_impact(cluster)
    # What the next cycle would do once the state is saved, by the engine itself.
    preview = preview_changes(Proposal(clusters=(ClusterProposal(cluster.name, state),)))
    return render(
        request,
        "clusters/state_confirm.html",
        {
            "cluster": cluster,
            "state": state,
            "label": ClusterState(state).label,
            "impact": impact,
            "preview": preview,
        },
    )


@staff_member_required
@require_http_methods(["GET", "POST"])
def cluster_delete_view(request: HttpRequest, name: str) -> HttpResponse:
    cluster = _cluster_or_404(name)
    error = ""
    if request.method == "POST":
        try:
            cluster_delete(cluster=cluster)
        except ApplicationError as exc:
            error = exc.message
        else:
            messages.success(request, f"Deleted {name}.")
            return redirect("cluster-list")
    return render(
        request,
        "clusters/delete_confirm.html",
        {"cluster": cluster, "jobs": cluster.jobs.count(), "error": error},
        status=409 if error else 200,
    )


@staff_member_required
@require_http_methods(["GET", "POST"])
def cluster_test_view(request: HttpRequest, name: str) -> HttpResponse:
    """GET shows the last result; POST connects now and shows what it found."""
    cluster = _cluster_or_404(name)
    report = cluster_test(cluster=cluster) if request.method == "POST" else None
    if report is not None:
        cluster.refresh_from_db()
    return render(request, "clusters/test.html", {"cluster": cluster, "report": report})


def _job_or_404(request: HttpRequest, job_id: str) -> Any:
    try:
        return job_get_for_user(request.user, job_id)
    except NotFound as exc:
        raise Http404("Job not found.") from exc


def _whole(value: str | None, default: int) -> int:
    try:
        return int(value) if value not in (None, "") else default
    except ValueError:
        return default


@login_required
@require_GET
def job_logs_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """One replica's log: the job page loads it as a fragment (htmx), or a page of its own.

    ``static/js/logs.js`` follows it (reading the REST endpoint after the last line every
    3 s), toggles its timestamps and keeps it scrolled to the bottom unless the reader
    scrolls up. Every choice is in the query, so the page works without JavaScript too.
    """
    job = _job_or_404(request, job_id)
    replica = _whole(request.GET.get("replica"), 0)
    tail = _whole(request.GET.get("tail"), LOG_TAIL_DEFAULT)
    attempt = request.GET.get("attempt", "current")
    if attempt not in LOG_ATTEMPTS:
        attempt = "current"
    if not 0 <= replica < job.replicas:
        replica = 0
    logs = job_logs(job=job, replica=replica, tail=tail, attempt=attempt)
    choice = {"replica": replica, "attempt": attempt}
    # The kubelet keeps a previous run's log only for a container that restarted in place:
    # offered then (or when asked for by hand), not on every job.
    restarted = attempt == "previous" or replica_restarted(job, replica)
    context = {
        "job": job,
        "logs": logs,
        "replicas": range(job.replicas),
        "tail": max(1, min(LOG_TAIL_MAX, tail)),
        "attempt": attempt,
        "attempts": LOG_ATTEMPTS if restarted else ("current",),
        "timestamps": request.GET.get("timestamps") == "1",
        "follow": request.GET.get("follow") == "1",
        "api_url": f"{reverse('api-job-logs', args=[job.public_id])}?{urlencode(choice)}",
        "download_url": f"{reverse('job-log-download', args=[job.public_id])}?{urlencode(choice)}",
    }
    template = "clusters/_logs.html" if request.htmx else "clusters/logs.html"
    return render(request, template, context)


@login_required
@require_GET
def job_log_download_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """One replica's whole log as a file (streamed from the cluster, never held here)."""
    job = _job_or_404(request, job_id)
    try:
        name, chunks = job_log_download(
            job=job,
            replica=_whole(request.GET.get("replica"), 0),
            attempt=request.GET.get("attempt", "current"),
            timestamps=request.GET.get("timestamps") == "1",
        )
    except NotFound as exc:
        return HttpResponse(f"{exc}\n", status=404, content_type="text/plain; charset=utf-8")
    except ApplicationError as exc:
        return HttpResponse(f"{exc}\n", status=400, content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(chunks, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
