"""Registering a cluster, every rejection, and "Test connection" in words, against kubesim."""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest
import yaml
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.core.management.base import CommandError

from clusters.connection_test import cluster_test
from clusters.models import Cluster
from clusters.registration import (
    cluster_credentials_from_input,
    cluster_register,
    cluster_settings_check,
)
from clusters.secrets import credentials_open
from kubesim import KubeSim
from portal.errors import ApplicationError
from tests.clusters.conftest import TEST_KEYS, kubeconfig_text

pytestmark = pytest.mark.django_db


def test_a_kubeconfig_registers_a_cluster_with_the_token_encrypted(sim, register):
    cluster = register(sim, name="east")
    assert cluster.api_url == sim.url
    assert sim.token not in cluster.credentials
    assert credentials_open(cluster.credentials).token == sim.token
    assert cluster.credential_hint == f"token …{sim.token[-4:]} ({len(sim.token)} characters)"
    assert "BEGIN CERTIFICATE" in cluster.ca_pem
    assert cluster.namespace == "gpupool"  # from the kubeconfig's context


def test_a_token_and_a_ca_register_through_the_same_validator(sim, catalog):
    credentials = cluster_credentials_from_input(
        api_url=sim.url, token=sim.token, ca_pem=sim.ca_pem.decode()
    )
    cluster, created = cluster_register(name="west", credentials=credentials)
    assert created and credentials_open(cluster.credentials).token == sim.token


def _config(sim: KubeSim, **changes: Any) -> str:
    config = yaml.safe_load(kubeconfig_text(sim))
    for path, value in changes.items():
        section, field = path.split(".")
        target = config[section][0][section[:-1]]
        if value is None:
            target.pop(field, None)
        else:
            target[field] = value
    return yaml.safe_dump(config)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (
            {"users.exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}},
            "users[0].user.exec",
        ),
        ({"users.tokenFile": "/var/run/token"}, "users[0].user.tokenFile"),
        ({"clusters.insecure-skip-tls-verify": True}, "insecure-skip-tls-verify"),
        ({"clusters.certificate-authority": "/etc/ca.crt"}, "certificate-authority"),
        ({"clusters.certificate-authority-data": None}, "certificate-authority-data"),
        ({"clusters.server": "http://127.0.0.1:6443"}, "must use https"),
    ],
    ids=["exec", "token file", "skip tls", "ca path", "no ca", "plain http"],
)
def test_an_unsafe_kubeconfig_is_refused_naming_the_field(sim, catalog, changes, words):
    with pytest.raises(ApplicationError) as caught:
        cluster_credentials_from_input(kubeconfig=_config(sim, **changes))
    assert words in caught.value.message
    assert sim.token not in caught.value.message
    assert not Cluster.objects.exists()


@pytest.mark.parametrize(
    ("server", "words"),
    [
        ("https://169.254.169.254", "cloud metadata"),
        ("https://[fd00:ec2::254]", "cloud metadata"),
        ("https://127.1:6443", "canonical"),
        ("https://no-such-host.invalid", "does not resolve"),
    ],
)
def test_unsafe_addresses_are_refused_before_any_connection(sim, catalog, server, words):
    credentials = (
        cluster_credentials_from_input(kubeconfig=_config(sim, **{"clusters.server": server}))
        if "127.1" not in server
        else None
    )
    if credentials is None:
        with pytest.raises(ApplicationError, match=words):
            cluster_credentials_from_input(kubeconfig=_config(sim, **{"clusters.server": server}))
        return
    with pytest.raises(ApplicationError, match=words):
        cluster_register(name="bad", credentials=credentials)
    assert not Cluster.objects.exists()


def test_loopback_is_refused_unless_the_operator_allows_it(sim, catalog, settings):
    settings.GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS = False
    credentials = cluster_credentials_from_input(kubeconfig=kubeconfig_text(sim))
    with pytest.raises(ApplicationError, match="loopback"):
        cluster_register(name="local", credentials=credentials)


def test_a_name_is_registered_once(sim, register):
    register(sim, name="east")
    with pytest.raises(ApplicationError, match="already registered"):
        register(sim, name="east")


# ---------------------------------------------------------------------------------------------
# Test connection, in words
# ---------------------------------------------------------------------------------------------
def test_connection_ok_reports_the_version_and_node_count(sim, register):
    cluster = register(sim)
    report = cluster_test(cluster=cluster)
    assert report.ok, report.summary
    assert report.summary == "OK: Kubernetes v1.31.0-kubesim, 9 nodes (8 with GPUs)"
    cluster.refresh_from_db()
    assert cluster.last_test_ok and cluster.kubernetes_version == "v1.31.0-kubesim"
    commands = next(c for c in report.checks if c.name == "commands")
    assert commands.ok and commands.message == "Volcano Commands can be created"


def test_connection_to_a_stopped_server_is_unreachable(sim, register):
    cluster = register(sim)
    sim.stop()
    report = cluster_test(cluster=cluster)
    assert not report.ok and report.summary.startswith("Unreachable")


def test_connection_with_another_ca_is_a_tls_mismatch(sim, register):
    cluster = register(sim)
    with KubeSim(sim.config, clock_speed=0) as other:
        Cluster.objects.filter(pk=cluster.pk).update(ca_pem=other.ca_pem.decode())
    cluster.refresh_from_db()
    report = cluster_test(cluster=cluster)
    assert not report.ok and report.summary.startswith("TLS/CA mismatch"), report.summary


def test_connection_with_a_revoked_token_is_401(sim, register):
    cluster = register(sim, token="not-a-known-token")
    report = cluster_test(cluster=cluster)
    assert not report.ok and report.summary.startswith("401 Unauthorized"), report.summary


def _register_with_certificate(sim, name, certificate):
    """Register through the kubeconfig parser, as an admin uploading one would."""
    from clusters.kubeconfig import parse_kubeconfig

    config = sim.kubeconfig_dict(namespace="gpupool", client_certificate=certificate)
    config.pop("preferences", None)
    cluster, _ = cluster_register(name=name, credentials=parse_kubeconfig(yaml.safe_dump(config)))
    return cluster


def test_a_client_certificate_cluster_is_tested_synced_and_runs_jobs(sim, catalog, vision):
    from clusters.clients import cluster_client
    from clusters.inventory import inventory_sync
    from clusters.queues import TeamQueue, queues_sync

    cluster = _register_with_certificate(
        sim, "east-mtls", sim.client_certificate("gpupool-portal", role="cluster-admin")
    )
    assert cluster.auth_method == "client-certificate"
    assert cluster.credential_hint.startswith("client certificate")
    report = cluster_test(cluster=cluster)
    assert report.ok, report.summary
    assert inventory_sync(cluster=cluster).ok
    assert queues_sync(cluster=cluster, desired=[TeamQueue("vision", 1, {})]).ok
    assert sim.get("queues", "gp-vision") is not None
    client = cluster_client(cluster)
    assert len(client.list_nodes()) == 9


def test_a_client_certificate_is_authorized_as_its_user(sim, catalog):
    viewer = sim.client_certificate("gpupool-viewer", role="view")
    report = cluster_test(cluster=_register_with_certificate(sim, "east-viewer", viewer))
    assert not report.ok
    assert report.summary.startswith("403 Forbidden: may not create Volcano Jobs"), report.summary


def test_a_client_certificate_from_another_ca_is_refused_at_the_handshake(sim, catalog):
    with KubeSim(sim.config, clock_speed=0) as other:
        foreign = other.client_certificate("gpupool-portal")
    report = cluster_test(cluster=_register_with_certificate(sim, "east-foreign", foreign))
    assert not report.ok
    assert report.summary.startswith("TLS/CA mismatch"), report.summary
    assert "handshake" in report.summary


def test_connection_without_create_on_jobs_is_403_naming_the_verb(sim, register):
    token = sim.add_token(role="view")
    cluster = register(sim, token=token)
    report = cluster_test(cluster=cluster)
    assert not report.ok
    assert report.summary.startswith("403 Forbidden: may not create Volcano Jobs"), report.summary
    assert "deploy/rbac.yaml" in report.summary


def test_connection_without_volcano_says_the_crds_are_missing(sim, register):
    cluster = register(sim)
    # kubesim has no switch to stop serving its CRDs; hide them from discovery server-side.
    served = sim.api.discovery

    def without_volcano(parts: list[str]) -> dict[str, Any]:
        answer = served(parts)
        if parts == ["apis"]:
            answer = {
                **answer,
                "groups": [g for g in answer["groups"] if "volcano" not in g["name"]],
            }
        return answer

    sim.api.discovery = without_volcano
    report = cluster_test(cluster=cluster)
    assert not report.ok
    assert report.summary.startswith("Volcano CRDs missing: batch.volcano.sh/v1alpha1"), (
        report.summary
    )


def test_connection_with_a_missing_namespace_says_so(sim, register):
    cluster = register(sim, namespace="nowhere")
    report = cluster_test(cluster=cluster)
    assert not report.ok and report.summary.startswith("Namespace missing: nowhere"), report.summary


def test_cluster_clients_never_touch_the_kubernetes_default_configuration(sim, register):
    from kubernetes.client import Configuration

    from clusters.clients import cluster_client

    default_before = Configuration._default
    cluster = register(sim)
    assert cluster_test(cluster=cluster).ok  # builds the client, lists, watches, dry-runs
    client = cluster_client(cluster)
    assert len(client.list_nodes()) == 9
    # Anything else in the process that builds a default client gets no host and no token.
    assert Configuration._default is default_before
    fresh = Configuration.get_default_copy()
    assert sim.url not in str(fresh.host) and not fresh.api_key
    assert client.api.configuration is not Configuration._default


def test_credentials_under_a_removed_key_fail_closed(sim, register, settings):
    cluster = register(sim)
    settings.GPUPOOL_SECRET_KEYS = [Fernet.generate_key().decode()]
    report = cluster_test(cluster=cluster)
    assert not report.ok
    assert "cannot be decrypted" in report.summary and "GPUPOOL_SECRET_KEYS" in report.summary


def test_rotating_keys_reseals_every_cluster_under_the_new_key(sim, register, settings):
    settings.GPUPOOL_SECRET_KEYS = [TEST_KEYS[1]]
    cluster = register(sim)
    settings.GPUPOOL_SECRET_KEYS = [TEST_KEYS[0], TEST_KEYS[1]]
    out = io.StringIO()
    call_command("rotate_cluster_keys", stdout=out)
    assert "1 cluster" in out.getvalue()
    settings.GPUPOOL_SECRET_KEYS = [TEST_KEYS[0]]  # the old key is gone now
    cluster.refresh_from_db()
    assert credentials_open(cluster.credentials).token == sim.token


# ---------------------------------------------------------------------------------------------
# The other doors: manage.py, REST, admin
# ---------------------------------------------------------------------------------------------
def test_register_and_test_from_the_command_line(sim, catalog, tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(sim, namespace="gpupool-system"))
    out = io.StringIO()
    call_command("register_cluster", "cli", "--kubeconfig", str(path), "--namespace",
                 "gpupool", stdout=out)  # fmt: skip
    assert "cluster cli registered" in out.getvalue() and sim.token not in out.getvalue()
    assert Cluster.objects.get(name="cli").namespace == "gpupool"  # the flag beats the context
    out = io.StringIO()
    call_command("test_cluster", "cli", stdout=out)
    assert "OK: Kubernetes v1.31.0-kubesim" in out.getvalue()
    bad = tmp_path / "bad"
    bad.write_text(_config(sim, **{"users.exec": {"command": "gcloud"}}))
    with pytest.raises(CommandError, match=r"users\[0\]\.user\.exec"):
        call_command("register_cluster", "bad", "--kubeconfig", str(bad))


def test_the_command_line_refuses_a_loopback_url_naming_the_kubeconfig_field(
    sim, catalog, tmp_path, settings
):
    settings.GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS = False
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(sim))
    with pytest.raises(CommandError) as caught:
        call_command("register_cluster", "local", "--kubeconfig", str(path))
    assert caught.value.returncode != 0  # what manage.py exits with
    message = str(caught.value)
    assert message.startswith("The API URL is refused: 127.0.0.1 is a loopback")
    assert "GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS" in message
    assert "(check the kubeconfig's clusters[0].cluster.server)" in message
    assert sim.token not in message
    assert not Cluster.objects.exists()


def test_the_command_line_refuses_a_bad_namespace_naming_the_flag(sim, catalog, tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(sim))
    with pytest.raises(CommandError, match=r"DNS-1123 label\. \(check --namespace\)"):
        call_command("register_cluster", "cli", "--kubeconfig", str(path), "--namespace", "ML_Jobs")
    assert not Cluster.objects.exists()


def test_a_failed_connection_test_exits_non_zero_and_says_what_failed(sim, register):
    register(sim, name="cli", namespace="nowhere")
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("test_cluster", "cli", stdout=out)
    assert caught.value.returncode != 0
    assert str(caught.value).startswith("Namespace missing: nowhere")
    assert "  ok   reachable: TLS verified; Kubernetes v1.31.0-kubesim" in out.getvalue()
    assert "  FAIL namespace: Namespace missing: nowhere" in out.getvalue()
    assert Cluster.objects.get(name="cli").last_test_ok is False


def test_everyone_lists_clusters_but_only_staff_see_connection_details(sim, register, api_as,
                                                                         bob, root):  # fmt: skip
    from clusters.inventory import inventory_sync

    inventory_sync(cluster=register(sim, name="east"))
    mine = api_as(bob).get("/api/v1/clusters/").json()
    assert mine[0]["name"] == "east" and mine[0]["gpus"]["a100-80gb"] == 20
    assert "api_url" not in mine[0] and "credential_hint" not in mine[0]
    staff = api_as(root).get("/api/v1/clusters/").json()
    assert staff[0]["api_url"] == sim.url and staff[0]["credential_hint"].startswith("token …")
    assert all(sim.token not in str(v) for v in staff[0].values())


def test_only_staff_register_and_test_over_rest(sim, catalog, api_as, bob, root):
    body = {"name": "rest", "kubeconfig": kubeconfig_text(sim)}
    assert api_as(bob).post("/api/v1/clusters/", body, format="json").status_code == 403
    created = api_as(root).post("/api/v1/clusters/", body, format="json")
    assert created.status_code == 201, created.json()
    assert sim.token not in created.content.decode()
    assert api_as(bob).post("/api/v1/clusters/rest/test/").status_code == 403
    report = api_as(root).post("/api/v1/clusters/rest/test/").json()
    assert report["ok"] and report["node_count"] == 9


def test_rest_registration_errors_name_the_field(sim, catalog, api_as, root):
    body = {"name": "rest", "api_url": sim.url, "token": sim.token}
    answer = api_as(root).post("/api/v1/clusters/", body, format="json")
    assert answer.status_code == 400
    assert "ca_pem" in answer.json()["extra"]["fields"]


def test_the_admin_registers_from_an_upload_and_never_shows_the_token(sim, catalog, client, root):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client.force_login(root)
    upload = SimpleUploadedFile("kubeconfig", kubeconfig_text(sim).encode())
    answer = client.post(
        "/admin/clusters/cluster/add/",
        {
            "name": "adm",
            "state": "enabled",
            "namespace": "gpupool",
            "scheduler_name": "volcano",
            "gpu_label": "gpu-type",
            "command_namespace": "gpupool-system",
            "tolerate_gpu_taint": "on",
            "kubeconfig": upload,
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    cluster = Cluster.objects.get(name="adm")
    page = client.get(f"/admin/clusters/cluster/{cluster.pk}/change/").content.decode()
    assert cluster.credential_hint in page
    assert sim.token not in page and cluster.credentials not in page
    token_b64 = base64.b64encode(sim.token.encode()).decode()
    assert token_b64 not in page


def test_the_staff_page_tests_a_connection(sim, register, client, root, bob):
    cluster = register(sim)
    client.force_login(bob)
    assert client.post(f"/clusters/{cluster.name}/test/").status_code == 302  # to the login
    client.force_login(root)
    page = client.post(f"/clusters/{cluster.name}/test/").content.decode()
    assert "OK: Kubernetes v1.31.0-kubesim, 9 nodes" in page


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://169.254.169.254/", "cloud metadata address"),
        ("http://metadata.google.internal/", "cloud metadata host"),
        ("http://[fd00:ec2::254]:9090", "cloud metadata address"),
        ("http://0.0.0.0:9090", "not a usable unicast address"),
        ("http://[::ffff:169.254.169.254]:9090", "cloud metadata address"),
        ("http://user:pw@10.0.0.5:9090", "user name or password"),
        ("ftp://10.0.0.5/", "must use http or https, not ftp"),
    ],
    ids=["metadata", "metadata host", "metadata v6", "unusable", "mapped v4", "userinfo", "ftp"],
)
def test_an_unsafe_prometheus_url_is_refused_at_registration(
    sim, catalog, api_as, root, url, words
):
    body = {"name": "prom", "kubeconfig": kubeconfig_text(sim), "prometheus_url": url}
    answer = api_as(root).post("/api/v1/clusters/", body, format="json")
    assert answer.status_code == 400, answer.json()
    (problem,) = answer.json()["extra"]["fields"]["prometheus_url"]
    assert words in problem
    assert not Cluster.objects.exists()


def test_a_loopback_prometheus_url_needs_local_urls_allowed(sim, catalog, settings, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text(sim))
    settings.GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS = False
    with pytest.raises(ApplicationError) as refused:
        cluster_settings_check(prometheus_url="http://127.0.0.1:9090")
    assert "loopback" in refused.value.fields["prometheus_url"][0]
    settings.GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS = True
    cluster_settings_check(prometheus_url="http://127.0.0.1:9090")
    out = io.StringIO()
    call_command(
        "register_cluster",
        "prom",
        "--kubeconfig",
        str(kubeconfig),
        "--prometheus-url",
        "http://127.0.0.1:9090/",
        stdout=out,
    )
    assert Cluster.objects.get(name="prom").prometheus_url == "http://127.0.0.1:9090/"
