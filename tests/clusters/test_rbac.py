"""The RBAC the portal ships for its service account: exactly what it needs, and nothing risky."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

RBAC_FILE = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
SERVICE_ACCOUNT = ("gpupool-portal", "gpupool-system")
PORTAL_NAMESPACE = "gpupool-system"

# What the portal does on a cluster, as (scope, apiGroup, resource, verb) and why.
# "cluster" = granted cluster-wide; "portal-namespace" = only in the portal's namespace.
NEEDED: dict[tuple[str, str, str, str], str] = {
    ("cluster", "batch.volcano.sh", "jobs", "create"): "dispatch",
    ("cluster", "batch.volcano.sh", "jobs", "get"): "409 AlreadyExists: read and compare UID",
    ("cluster", "batch.volcano.sh", "jobs", "list"): "status reconcile",
    ("cluster", "batch.volcano.sh", "jobs", "watch"): "status watch",
    ("cluster", "batch.volcano.sh", "jobs", "delete"): "cancel and preemption",
    ("cluster", "scheduling.volcano.sh", "podgroups", "get"): "why a gang is Unschedulable",
    ("cluster", "scheduling.volcano.sh", "podgroups", "list"): "pending reasons in bulk",
    ("cluster", "scheduling.volcano.sh", "podgroups", "watch"): "pending reasons as they change",
    ("cluster", "", "pods", "get"): "replica state",
    ("cluster", "", "pods", "list"): "reconcile and inventory (GPUs used by other pods)",
    ("cluster", "", "pods", "watch"): "pod reasons within seconds",
    ("cluster", "", "pods/log", "get"): "the logs page and API",
    ("cluster", "", "events", "get"): "pod-level reasons",
    ("cluster", "", "events", "list"): "pod-level reasons",
    ("cluster", "", "events", "watch"): "pod-level reasons",
    ("cluster", "events.k8s.io", "events", "get"): "pod-level reasons (events/v1)",
    ("cluster", "events.k8s.io", "events", "list"): "pod-level reasons (events/v1)",
    ("cluster", "events.k8s.io", "events", "watch"): "pod-level reasons (events/v1)",
    ("cluster", "", "services", "create"): "an inference job's Service",
    ("cluster", "", "services", "delete"): "a finished or cancelled inference job",
    ("cluster", "networking.k8s.io", "ingresses", "create"): "an inference job's Ingress",
    ("cluster", "networking.k8s.io", "ingresses", "delete"): "a finished inference job",
    ("cluster", "", "nodes", "get"): "inventory",
    ("cluster", "", "nodes", "list"): "inventory",
    ("cluster", "", "nodes", "watch"): "inventory",
    ("cluster", "", "namespaces", "get"): "test connection: is the job namespace there",
    ("cluster", "", "namespaces", "create"): "remake a job namespace the cluster lost",
    ("cluster", "scheduling.volcano.sh", "queues", "get"): "queue drift",
    ("cluster", "scheduling.volcano.sh", "queues", "list"): "queue sync",
    ("cluster", "scheduling.volcano.sh", "queues", "watch"): "queue state",
    ("cluster", "scheduling.volcano.sh", "queues", "create"): "first queue sync",
    ("cluster", "scheduling.volcano.sh", "queues", "patch"): "server-side apply",
    ("portal-namespace", "bus.volcano.sh", "commands", "create"): "open and close queues",
}

FORBIDDEN_RESOURCES = {
    "secrets",
    "configmaps",
    "serviceaccounts",
    "serviceaccounts/token",
    "pods/exec",
    "pods/attach",
    "pods/portforward",
    "pods/proxy",
    "pods/ephemeralcontainers",
    "nodes/proxy",
    "services/proxy",
    "roles",
    "rolebindings",
    "clusterroles",
    "clusterrolebindings",
    "certificatesigningrequests",
    "tokenreviews",
    "persistentvolumes",
}
FORBIDDEN_VERBS = {"escalate", "bind", "impersonate", "deletecollection", "update", "proxy"}


def load_documents() -> list[dict[str, Any]]:
    assert RBAC_FILE.is_file(), f"{RBAC_FILE} is missing"
    documents = [d for d in yaml.safe_load_all(RBAC_FILE.read_text()) if d is not None]
    assert documents
    return documents


DOCUMENTS = load_documents()


def of_kind(*kinds: str) -> list[dict[str, Any]]:
    return [d for d in DOCUMENTS if d["kind"] in kinds]


def roles() -> list[dict[str, Any]]:
    return of_kind("Role", "ClusterRole")


def bindings() -> list[dict[str, Any]]:
    return of_kind("RoleBinding", "ClusterRoleBinding")


def rules() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for role in roles():
        for rule in role.get("rules", []):
            yield role, rule


def scope_of(binding: dict[str, Any]) -> str:
    if binding["kind"] == "ClusterRoleBinding":
        return "cluster"
    assert binding["metadata"]["namespace"] == PORTAL_NAMESPACE, "unexpected namespaced binding"
    return "portal-namespace"


def granted() -> set[tuple[str, str, str, str]]:
    """Every (scope, group, resource, verb) the service account ends up with."""
    by_ref = {
        (r["kind"], r["metadata"]["name"], r["metadata"].get("namespace")): r for r in roles()
    }
    grants = set()
    for binding in bindings():
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = by_ref[(ref["kind"], ref["name"], namespace)]
        for rule in role.get("rules", []):
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants.add((scope_of(binding), group, resource, verb))
    return grants


def test_every_document_is_a_known_kind_with_a_name():
    for document in DOCUMENTS:
        assert document["kind"] in {
            "Namespace",
            "ServiceAccount",
            "Role",
            "ClusterRole",
            "RoleBinding",
            "ClusterRoleBinding",
        }
        assert document["metadata"]["name"]
        if document["kind"] in {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}:
            assert document["apiVersion"] == "rbac.authorization.k8s.io/v1"


def test_the_service_account_exists_and_does_not_mount_its_token():
    (account,) = of_kind("ServiceAccount")

    assert (account["metadata"]["name"], account["metadata"]["namespace"]) == SERVICE_ACCOUNT
    assert account["automountServiceAccountToken"] is False


def test_no_wildcards_anywhere():
    for role, rule in rules():
        for key in ("apiGroups", "resources", "verbs", "resourceNames"):
            for value in rule.get(key, []):
                assert "*" not in value, f"{role['metadata']['name']} has a wildcard in {key}"
    assert "*" not in json.dumps(DOCUMENTS), "a wildcard outside the rules (comments aside)"


@pytest.mark.parametrize("resource", sorted(FORBIDDEN_RESOURCES))
def test_dangerous_resources_are_never_granted(resource):
    for role, rule in rules():
        assert resource not in rule["resources"], f"{role['metadata']['name']} grants {resource}"


@pytest.mark.parametrize("verb", sorted(FORBIDDEN_VERBS))
def test_dangerous_verbs_are_never_granted(verb):
    for role, rule in rules():
        assert verb not in rule["verbs"], f"{role['metadata']['name']} grants {verb}"


def test_roles_are_plain_resource_rules():
    for role, rule in rules():
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, role["metadata"]["name"]
        assert "nonResourceURLs" not in rule
    for role in roles():
        assert "aggregationRule" not in role


def test_bindings_bind_only_the_portal_service_account_to_roles_in_this_file():
    names = {(r["kind"], r["metadata"]["name"]) for r in roles()}
    for binding in bindings():
        assert binding["roleRef"]["apiGroup"] == "rbac.authorization.k8s.io"
        assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in names
        assert [(s["kind"], s["name"], s["namespace"]) for s in binding["subjects"]] == [
            ("ServiceAccount", *SERVICE_ACCOUNT)
        ]
    bound = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in bindings()}
    assert bound == names, "a role is defined but never bound, or bound twice"


@pytest.mark.parametrize(
    ("grant", "why"),
    sorted(NEEDED.items()),
    ids=lambda v: "/".join(v) if isinstance(v, tuple) else "",
)
def test_every_verb_the_portal_needs_is_granted(grant, why):
    assert grant in granted(), f"missing {grant}, needed for {why}"


def test_nothing_beyond_what_the_portal_needs_is_granted():
    extra = granted() - set(NEEDED)

    assert not extra, f"granted but not needed (add to NEEDED with a reason, or remove): {extra}"


def test_queue_commands_are_confined_to_the_portal_namespace():
    assert ("cluster", "bus.volcano.sh", "commands", "create") not in granted()
