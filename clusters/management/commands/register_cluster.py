"""``manage.py register_cluster NAME --kubeconfig FILE [--namespace …]`` for scripts;
``--in-cluster`` instead of a kubeconfig registers the cluster the portal runs in, reached
with the pod's own service account (``clusters.incluster``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from clusters.checkup import cluster_checkup
from clusters.connection_test import cluster_test
from clusters.kubeconfig import MAX_KUBECONFIG_BYTES
from clusters.registration import (
    cluster_credentials_from_input,
    cluster_register,
    cluster_register_in_cluster,
)
from portal.errors import ApplicationError

# Where each field a service may name comes from on this command line.
_SOURCES = {
    "name": "NAME",
    "kubeconfig": "--kubeconfig",
    "api_url": "the kubeconfig's clusters[0].cluster.server",
    "token": "the kubeconfig's users[0].user.token",
    "ca_pem": "the kubeconfig's clusters[0].cluster.certificate-authority-data",
    "namespace": "--namespace",
    "state": "--state",
    "in_cluster": "--in-cluster (run it in a portal pod)",
}


def _naming_the_source(exc: ApplicationError) -> str:
    """The service's message plus where to fix it here: a field name means nothing to someone
    who typed a flag or wrote a kubeconfig."""
    sources = [_SOURCES.get(name, f"--{name.replace('_', '-')}") for name in exc.fields]
    return f"{exc.message} (check {', '.join(sources)})" if sources else exc.message


class Command(BaseCommand):
    help = (
        "Register a cluster from a kubeconfig (or update it with --update). The kubeconfig "
        "is validated, its token encrypted, and the file is never copied."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--kubeconfig", help="path, or - for stdin")
        source.add_argument(
            "--in-cluster",
            action="store_true",
            help="the cluster this portal runs in, through the pod's service account "
            "(deploy/kubernetes/components/in-cluster); nothing secret is stored",
        )
        parser.add_argument(
            "--namespace", help="job namespace (default: the context's, or gpupool)"
        )
        parser.add_argument("--namespace-per-team", action="store_true", help="use gp-<team>")
        parser.add_argument("--scheduler-name")
        parser.add_argument("--gpu-label", help="node label naming the GPU model (gpu-type)")
        parser.add_argument("--prometheus-url")
        parser.add_argument("--state", choices=["enabled", "draining", "disabled"])
        parser.add_argument("--request-rate", type=int, help="API requests per second")
        parser.add_argument("--creates-in-flight", type=int)
        parser.add_argument(
            "--sharing-mode",
            choices=["none", "volcano-vgpu", "hami"],
            help="how shared (fractional) GPU jobs ask for their share",
        )
        parser.add_argument("--update", action="store_true", help="replace an existing one")
        parser.add_argument("--test", action="store_true", help="test the connection afterwards")

    def handle(self, *args: Any, **options: Any) -> None:
        names = {
            "namespace": "namespace",
            "namespace_per_team": "namespace_per_team",
            "scheduler_name": "scheduler_name",
            "gpu_label": "gpu_label",
            "prometheus_url": "prometheus_url",
            "state": "state",
            "request_rate": "request_rate",
            "creates_in_flight": "creates_in_flight",
            "sharing_mode": "sharing_mode",
        }
        cluster_options = {
            field: options[opt]
            for opt, field in names.items()
            if options.get(opt) not in (None, False)
        }
        try:
            if options["in_cluster"]:
                cluster, created = cluster_register_in_cluster(
                    name=options["name"], update=options["update"], **cluster_options
                )
            else:
                credentials = cluster_credentials_from_input(
                    kubeconfig=_kubeconfig_read(options["kubeconfig"])
                )
                cluster, created = cluster_register(
                    name=options["name"],
                    credentials=credentials,
                    update=options["update"],
                    **cluster_options,
                )
        except ApplicationError as exc:
            raise CommandError(_naming_the_source(exc)) from None
        verb = "registered" if created else "updated"
        self.stdout.write(
            self.style.SUCCESS(
                f"cluster {cluster.name} {verb}: {cluster.api_url} ({cluster.credential_hint})"
            )
        )
        if options["test"]:
            report = cluster_test(cluster=cluster)
            self.stdout.write(report.summary)
            if not report.ok:
                raise CommandError("the connection test failed")
            # Connected: the cluster doctor's first look (it runs with every sync after this).
            doctor = cluster_checkup(cluster=cluster)
            self.stdout.write(f"cluster doctor: {doctor.message}")
            for finding in doctor.findings:
                self.stdout.write(f"  {finding.severity}: {finding.title}")


def _kubeconfig_read(source: str) -> bytes:
    """The kubeconfig's bytes (at most one more than allowed, so the service can refuse)."""
    if source == "-":
        return sys.stdin.buffer.read(MAX_KUBECONFIG_BYTES + 1)
    path = Path(source)
    if not path.is_file():
        raise CommandError(f"{source}: no such file")
    return path.read_bytes()[: MAX_KUBECONFIG_BYTES + 1]
