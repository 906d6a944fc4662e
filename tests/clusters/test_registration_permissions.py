""" "Test connection" asks for every verb the portal uses, and for every job namespace.

The tokens here carry exactly what ``deploy/rbac.yaml`` grants the portal's service account,
less one verb: the connection test must pass with the file as shipped and name what is missing
when a cluster admin left something out (a token without "watch" passed before, and then the
watcher failed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clusters.connection_test import cluster_test
from clusters.models import Cluster
from kubesim import KubeSim
from portal.models import Team

pytestmark = pytest.mark.django_db

RBAC_FILE = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"


def _rbac_rules(*, without: tuple[str, str, str] | None = None) -> list[dict[str, Any]]:
    """deploy/rbac.yaml's roles as kubesim rules (a Role only in its namespace), less
    ``without`` = (API group, resource, verb)."""
    rules = []
    for doc in yaml.safe_load_all(RBAC_FILE.read_text()):
        if not doc or doc["kind"] not in ("ClusterRole", "Role"):
            continue
        namespaces = [doc["metadata"]["namespace"]] if doc["kind"] == "Role" else None
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    verbs = [v for v in rule["verbs"] if (group, resource, v) != without]
                    if verbs:
                        rules.append(
                            {
                                "apiGroups": [group],
                                "resources": [resource],
                                "verbs": verbs,
                                "namespaces": namespaces,
                            }
                        )
    return rules


def _token(sim: KubeSim, without: tuple[str, str, str] | None = None) -> str:
    return sim.add_token(role={"user": "gpupool-portal", "rules": _rbac_rules(without=without)})


def test_a_token_with_exactly_the_shipped_rbac_passes(sim, register):
    report = cluster_test(cluster=register(sim, token=_token(sim)))
    assert report.ok, report.summary
    assert report.summary == "OK: Kubernetes v1.31.0-kubesim, 9 nodes (8 with GPUs)"
    checks = {c.name: (c.ok, c.message) for c in report.checks}
    assert checks["permissions"] == (True, "every needed verb is granted")
    assert checks["commands"] == (True, "Volcano Commands can be created")


@pytest.mark.parametrize(
    ("without", "words"),
    [
        (
            ("batch.volcano.sh", "jobs", "watch"),
            "may not watch Volcano Jobs (jobs.batch.volcano.sh cluster-wide), "
            "needed for following job status as it changes",
        ),
        (
            ("", "pods", "list"),
            "may not list pods (pods cluster-wide), needed for replica state and the GPU inventory",
        ),
        (
            ("", "pods/log", "get"),
            "may not get pod logs (pods/log in namespace gpupool), needed for showing logs",
        ),
        (
            ("", "events", "list"),
            "may not list events (events in namespace gpupool), needed for pod-level reasons",
        ),
        (
            ("scheduling.volcano.sh", "queues", "create"),
            "may not create Volcano Queues (queues.scheduling.volcano.sh cluster-wide), "
            "needed for creating a team's queue",
        ),
        (
            ("", "nodes", "watch"),
            "may not watch nodes (nodes cluster-wide), needed for the GPU inventory",
        ),
    ],
    ids=["watch jobs", "list pods", "get pod logs", "list events", "create queues", "watch nodes"],
)
def test_a_missing_verb_is_a_403_naming_the_verb_and_resource(sim, register, without, words):
    cluster = register(sim, token=_token(sim, without=without))
    report = cluster_test(cluster=cluster)
    assert not report.ok
    assert report.summary == f"403 Forbidden: {words}; apply deploy/rbac.yaml"
    assert next(c.message for c in report.checks if not c.ok) == words
    cluster.refresh_from_db()
    assert cluster.last_test_ok is False and cluster.last_test_message == report.summary


def test_every_missing_verb_is_named_in_one_test(sim, register):
    token = sim.add_token(role="view")  # reads everything, writes nothing
    report = cluster_test(cluster=register(sim, token=token))
    refused = [c.name for c in report.checks if not c.ok and c.name != "permissions"]
    assert refused == [
        "create jobs.batch.volcano.sh",
        "delete jobs.batch.volcano.sh",
        "create queues.scheduling.volcano.sh",
        "patch queues.scheduling.volcano.sh",
        "create services",
        "delete services",
        "create ingresses.networking.k8s.io",
        "delete ingresses.networking.k8s.io",
    ]
    assert report.summary.count("may not ") == 8


# ---------------------------------------------------------------------------------------------
# Job namespaces
# ---------------------------------------------------------------------------------------------
def test_one_namespace_per_team_without_teams_says_there_is_nothing_to_check_yet(sim, register):
    assert not Team.objects.exists()
    report = cluster_test(cluster=register(sim, namespace_per_team=True))
    assert report.ok, report.summary
    assert report.summary == (
        "OK: Kubernetes v1.31.0-kubesim, 9 nodes (8 with GPUs); but no team namespace to check "
        "yet: there are no teams; create gp-<team> for each team before its jobs run here"
    )
    namespace = next(c for c in report.checks if c.name == "namespace")
    assert namespace.message.startswith("no team namespace to check yet")


def test_one_namespace_per_team_reports_a_missing_team_namespace_by_name(
    sim, register, vision, language
):
    cluster = register(sim, namespace_per_team=True)
    sim.create_namespace("gp-vision")
    report = cluster_test(cluster=cluster)
    assert not report.ok
    assert report.summary == (
        "Namespace missing: gp-language "
        "(create it, or sync the queues: the portal makes missing job namespaces)"
    )
    sim.create_namespace("gp-language")
    report = cluster_test(cluster=cluster)
    assert report.ok, report.summary
    namespace = next(c for c in report.checks if c.name == "namespace")
    assert namespace.message == "namespace gp-language, gp-vision exists"


# ---------------------------------------------------------------------------------------------
# The URL is checked again when connecting
# ---------------------------------------------------------------------------------------------
def test_a_registered_cluster_whose_url_is_no_longer_allowed_is_refused(sim, register, settings):
    cluster = register(sim)  # registered while loopback was allowed
    settings.GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS = False  # the operator switched it off, restarted
    requests_before = sim.api.requests
    report = cluster_test(cluster=cluster)
    assert not report.ok
    assert report.summary == (
        "Cannot connect: the API URL is refused: 127.0.0.1 is a loopback or link-local address "
        "(allowed only where the operator setting GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS permits "
        "local clusters)"
    )
    assert sim.api.requests == requests_before  # not one request went to the cluster
    cluster.refresh_from_db()
    assert cluster.last_test_ok is False and cluster.last_test_message == report.summary
    assert Cluster.objects.count() == 1
