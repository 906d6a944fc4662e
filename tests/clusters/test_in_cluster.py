"""A portal pod drives the cluster it runs in through its own service account
(``register_cluster NAME --in-cluster``): nothing secret is stored, the token is read from the
projected file on every connection (the kubelet rotates it), and the API server is the pod's
own, whatever the stored URL says. kubesim stands in for the API server; the service-account
folder is a temporary one laid out as the kubelet lays it out."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from clusters.connection_test import cluster_test
from clusters.models import AuthMethod, Cluster


def _jwt(subject: str) -> str:
    """A token shaped like a service account's (kubesim accepts any registered string)."""
    claims = base64.urlsafe_b64encode(json.dumps({"sub": subject}).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJSUzI1NiJ9.{claims}.c2lnbmF0dXJl"


@pytest.fixture
def pod(sim, tmp_path, settings, monkeypatch) -> Path:
    """This process, as a pod of gpupool-system running as gpupool-portal."""
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    token = sim.add_token(
        _jwt("system:serviceaccount:gpupool-system:gpupool-portal"), "cluster-admin"
    )
    (folder / "token").write_text(token)
    (folder / "ca.crt").write_bytes(sim.ca_pem)
    (folder / "namespace").write_text("gpupool-system")
    settings.GPUPOOL_SERVICE_ACCOUNT_DIR = str(folder)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(sim.port))
    return folder


def _token_replace(folder: Path, token: str) -> None:
    """What the kubelet does: a new file moved into place (a new inode)."""
    fresh = folder / "token.new"
    fresh.write_text(token)
    os.replace(fresh, folder / "token")


@pytest.mark.django_db
def test_register_in_cluster_stores_no_secret_and_connects(pod, catalog, capsys):
    call_command("register_cluster", "local", "--in-cluster", "--test")
    out = capsys.readouterr().out
    cluster = Cluster.objects.get(name="local")
    assert cluster.auth_method == AuthMethod.IN_CLUSTER
    assert cluster.credentials == ""
    assert cluster.credential_hint == "service account gpupool-system/gpupool-portal"
    assert cluster.api_url.startswith("https://127.0.0.1:")
    assert "cluster local registered" in out
    # The cluster doctor's first look, right after the test: kubesim's small pool has a B300
    # the catalog does not know.
    assert "cluster doctor: 2 warnings" in out
    assert "  warning: gpu-type=b300 is not a GPU model the catalog knows" in out
    assert cluster_test(cluster=cluster).ok


@pytest.mark.django_db
def test_a_rotated_token_is_read_at_the_next_request(pod, sim, catalog):
    call_command("register_cluster", "local", "--in-cluster")
    cluster = Cluster.objects.get(name="local")
    assert cluster_test(cluster=cluster).ok
    _token_replace(pod, "revoked-or-expired")
    report = cluster_test(cluster=cluster)
    assert not report.ok
    assert "401" in report.summary
    _token_replace(
        pod, sim.add_token(_jwt("system:serviceaccount:gpupool-system:x"), "cluster-admin")
    )
    assert cluster_test(cluster=cluster).ok


@pytest.mark.django_db
def test_the_pods_own_api_server_is_used_whatever_the_stored_url(pod, catalog):
    """The stored URL is only shown: an edited one cannot send the pod's token elsewhere."""
    call_command("register_cluster", "local", "--in-cluster")
    Cluster.objects.filter(name="local").update(api_url="https://203.0.113.9:6443")
    assert cluster_test(cluster=Cluster.objects.get(name="local")).ok


@pytest.mark.django_db
def test_outside_a_pod_the_command_says_what_is_missing(pod, catalog, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(CommandError, match=r"not running in a Kubernetes pod .*--in-cluster"):
        call_command("register_cluster", "local", "--in-cluster")
    assert not Cluster.objects.exists()


@pytest.mark.django_db
def test_without_a_mounted_token_the_command_says_how_to_mount_it(pod, catalog):
    (pod / "token").unlink()
    with pytest.raises(CommandError, match="automountServiceAccountToken: true"):
        call_command("register_cluster", "local", "--in-cluster")


@pytest.mark.django_db
def test_a_registered_in_cluster_cluster_moved_out_of_its_pod_is_unavailable(
    pod, catalog, monkeypatch
):
    call_command("register_cluster", "local", "--in-cluster")
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT")
    report = cluster_test(cluster=Cluster.objects.get(name="local"))
    assert not report.ok
    assert "in-cluster: not running in a Kubernetes pod" in report.summary


def test_kubeconfig_and_in_cluster_are_one_or_the_other():
    with pytest.raises(CommandError, match="not allowed with argument"):
        call_command("register_cluster", "x", "--in-cluster", "--kubeconfig", "k.yaml")
