"""The cluster admin as a platform admin uses it: field errors instead of 500s, renames that keep
one cluster, and "Test connection" answering in the words of the report."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from clusters.models import Cluster
from clusters.secrets import credentials_open
from kubesim import KubeSim
from tests.clusters.conftest import kubeconfig_text

pytestmark = pytest.mark.django_db

ADD = "/admin/clusters/cluster/add/"
DNS_LABEL_HELP = "Lower-case letters, digits and &#x27;-&#x27;, at most 63 characters."


def _change(cluster: Cluster) -> str:
    return f"/admin/clusters/cluster/{cluster.pk}/change/"


def _form(**changes: Any) -> dict[str, Any]:
    """What the add/change page posts when an admin fills it in (unchecked boxes are absent)."""
    data: dict[str, Any] = {
        "name": "adm",
        "state": "enabled",
        "namespace": "gpupool",
        "scheduler_name": "volcano",
        "gpu_label": "gpu-type",
        "prometheus_url": "",
        "command_namespace": "gpupool-system",
        "tolerate_gpu_taint": "on",
        "run_as_non_root": "on",
        "request_rate": "",
        "creates_in_flight": "",
        "new_api_url": "",
        "token": "",
        "new_ca_pem": "",
    }
    data.update(changes)
    return data


def _upload(sim: KubeSim, token: str | None = None) -> SimpleUploadedFile:
    return SimpleUploadedFile("kubeconfig", kubeconfig_text(sim, token=token).encode())


def _errors(answer: Any) -> dict[str, list[str]]:
    """The field errors the re-rendered page shows."""
    assert answer.status_code == 200, answer.status_code
    return {k: list(v) for k, v in answer.context["adminform"].form.errors.items()}


@pytest.fixture
def admin_client(client: Any, root: Any) -> Any:
    client.force_login(root)
    return client


# ---------------------------------------------------------------------------------------------
# The form applies cluster_register's rules, with or without credentials
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["East_1", "East", "gpu_east"])
def test_a_name_the_cli_refuses_is_a_field_error_on_add(sim, catalog, admin_client, name):
    answer = admin_client.post(ADD, _form(name=name, kubeconfig=_upload(sim)))
    assert _errors(answer) == {
        "name": ["Lower-case letters, digits and '-', at most 63 characters."]
    }
    assert DNS_LABEL_HELP in answer.content.decode()
    assert not Cluster.objects.exists()


@pytest.mark.parametrize("field", ["namespace", "command_namespace"])
def test_an_invalid_namespace_with_credentials_is_a_field_error_not_a_500(
    sim, catalog, admin_client, field
):
    answer = admin_client.post(ADD, _form(**{field: "Team_A"}, kubeconfig=_upload(sim)))
    assert _errors(answer) == {
        field: ["Lower-case letters, digits and '-', at most 63 characters."]
    }
    assert not Cluster.objects.exists()


def test_every_wrong_field_is_named_at_once(sim, catalog, admin_client):
    answer = admin_client.post(
        ADD, _form(name="East", namespace="ML", command_namespace="x_y", kubeconfig=_upload(sim))
    )
    assert set(_errors(answer)) == {"name", "namespace", "command_namespace"}
    assert not Cluster.objects.exists()


def test_changing_only_options_still_applies_the_name_and_namespace_rules(
    sim, register, admin_client
):
    cluster = register(sim, name="adm")
    answer = admin_client.post(_change(cluster), _form(name="Adm_2", namespace="Team_A"))
    assert set(_errors(answer)) == {"name", "namespace"}
    cluster.refresh_from_db()
    assert (cluster.name, cluster.namespace) == ("adm", "gpupool")


def test_changing_only_options_keeps_the_credentials(sim, register, admin_client):
    cluster = register(sim, name="adm")
    sealed = cluster.credentials
    answer = admin_client.post(_change(cluster), _form(name="adm", namespace="gpupool-system"))
    assert answer.status_code == 302
    cluster.refresh_from_db()
    assert cluster.namespace == "gpupool-system" and cluster.credentials == sealed


# ---------------------------------------------------------------------------------------------
# Renaming keeps one cluster
# ---------------------------------------------------------------------------------------------
def test_renaming_while_changing_credentials_updates_the_same_cluster(sim, register, admin_client):
    cluster = register(sim, name="adm")
    new_token = sim.add_token(role="cluster-admin")
    answer = admin_client.post(
        _change(cluster), _form(name="renamed", kubeconfig=_upload(sim, token=new_token))
    )
    assert answer.status_code == 302, _errors(answer)
    assert list(Cluster.objects.values_list("pk", "name")) == [(cluster.pk, "renamed")]
    cluster.refresh_from_db()
    assert credentials_open(cluster.credentials).token == new_token
    assert cluster.credential_hint.startswith(f"token …{new_token[-4:]}")


def test_renaming_with_a_token_and_the_stored_url_and_ca(sim, register, admin_client):
    cluster = register(sim, name="adm")
    new_token = sim.add_token(role="cluster-admin")
    answer = admin_client.post(_change(cluster), _form(name="renamed", token=new_token))
    assert answer.status_code == 302, _errors(answer)
    assert list(Cluster.objects.values_list("pk", "name")) == [(cluster.pk, "renamed")]
    assert credentials_open(Cluster.objects.get().credentials).token == new_token


def test_renaming_onto_another_cluster_is_a_field_error(sim, register, admin_client):
    register(sim, name="east")
    cluster = register(sim, name="adm")
    answer = admin_client.post(_change(cluster), _form(name="east", kubeconfig=_upload(sim)))
    assert _errors(answer) == {"name": ["Cluster with this Name already exists."]}
    assert sorted(Cluster.objects.values_list("name", flat=True)) == ["adm", "east"]


# ---------------------------------------------------------------------------------------------
# The "Test connection" action
# ---------------------------------------------------------------------------------------------
def _run_action(admin_client: Any, action: str, *clusters: Cluster) -> tuple[list[Any], str]:
    """The messages the changelist shows after the action, and the page itself."""
    answer = admin_client.post(
        "/admin/clusters/cluster/",
        {"action": action, "_selected_action": [c.pk for c in clusters]},
        follow=True,
    )
    assert answer.status_code == 200
    return list(answer.context["messages"]), answer.content.decode()


def test_the_test_connection_action_shows_each_report_as_a_message(sim, register, admin_client):
    good = register(sim, name="good")
    bad = register(sim, name="bad", namespace="nowhere")
    messages, page = _run_action(admin_client, "test_connection", good, bad)
    shown = {(m.tags, str(m)) for m in messages}
    assert shown == {
        ("success", "good: OK: Kubernetes v1.31.0-kubesim, 9 nodes (8 with GPUs)"),
        (
            "error",
            "bad: Namespace missing: nowhere "
            "(create it, or sync the queues: the portal makes missing job namespaces)",
        ),
    }
    assert "OK: Kubernetes v1.31.0-kubesim, 9 nodes (8 with GPUs)</li>" in page
    assert (
        "Namespace missing: nowhere "
        "(create it, or sync the queues: the portal makes missing job namespaces)" in page
    )
    assert sim.token not in page
    good.refresh_from_db()
    assert good.last_test_ok and good.last_test_message.startswith("OK: Kubernetes")


def test_an_unsafe_prometheus_url_is_a_field_error_on_change(sim, register, admin_client):
    cluster = register(sim, name="adm")
    answer = admin_client.post(_change(cluster), _form(prometheus_url="http://169.254.169.254/"))
    errors = _errors(answer)
    assert list(errors) == ["prometheus_url"]
    assert "169.254.169.254 is a cloud metadata address" in errors["prometheus_url"][0]
    cluster.refresh_from_db()
    assert cluster.prometheus_url == ""


# ---------------------------------------------------------------------------------------------
# Serving: how inference jobs are reached
# ---------------------------------------------------------------------------------------------
def test_an_admin_exposes_inference_jobs_through_an_ingress(sim, register, admin_client):
    cluster = register(sim, name="adm")
    assert cluster.serving_exposure == "clusterip"
    form = _form(
        serving_exposure="ingress",
        ingress_host_pattern="{job}.{team}.serve.example.org",
        ingress_class_name="nginx",
    )
    assert admin_client.post(_change(cluster), form).status_code == 302
    cluster.refresh_from_db()
    assert (cluster.serving_exposure, cluster.ingress_host_pattern, cluster.ingress_class_name) == (
        "ingress",
        "{job}.{team}.serve.example.org",
        "nginx",
    )
    # Left out of a later post, the exposure is kept.
    assert admin_client.post(_change(cluster), _form(ingress_host_pattern=form[
        "ingress_host_pattern"])).status_code == 302  # fmt: skip
    cluster.refresh_from_db()
    assert cluster.serving_exposure == "ingress"


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"serving_exposure": "ingress"}, "ingress_host_pattern", "needs a host pattern"),
        ({"ingress_host_pattern": "serve.example.org"}, "ingress_host_pattern", "{job}"),
        ({"ingress_host_pattern": "{job}.{cluster}.org"}, "ingress_host_pattern", "{cluster}"),
        ({"ingress_class_name": "Not_A_Class"}, "ingress_class_name", "Lower-case letters"),
        ({"serving_exposure": "nodeport"}, "serving_exposure", "nodeport"),
    ],
    ids=[
        "ingress without a pattern",
        "pattern without {job}",
        "unknown placeholder",
        "bad class name",
        "unknown exposure",
    ],
)
def test_a_serving_setting_that_cannot_work_is_a_field_error(
    sim, register, admin_client, changes, field, words
):
    cluster = register(sim, name="adm")
    errors = _errors(admin_client.post(_change(cluster), _form(**changes)))
    assert field in errors, errors
    assert words in " ".join(errors[field]) or field == "serving_exposure"
    cluster.refresh_from_db()
    assert (cluster.serving_exposure, cluster.ingress_host_pattern) == ("clusterip", "")
