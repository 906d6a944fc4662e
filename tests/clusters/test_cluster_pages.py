"""Platform admins manage clusters in the portal's own pages: register (a kubeconfig upload or
the parts), test, enable, drain with what it touches said first, and delete; a failed save
keeps every typed field."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from clusters.models import Cluster, ClusterState, Node
from kubesim import KubeSim
from portal.models import JobState
from scheduling.models import GpuModel
from tests.clusters.conftest import kubeconfig_text
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def test_an_uploaded_kubeconfig_registers_a_disabled_cluster_and_leads_to_its_test(
    client, root, catalog, sim: KubeSim
):
    client.force_login(root)
    upload = SimpleUploadedFile("east.kubeconfig", kubeconfig_text(sim).encode())
    answer = client.post("/clusters/register/", {"name": "east", "kubeconfig_file": upload})
    assert answer.status_code == 302 and answer["Location"] == "/clusters/east/test/"
    cluster = Cluster.objects.get(name="east")
    assert cluster.state == ClusterState.DISABLED and cluster.credential_hint
    tested = client.post("/clusters/east/test/").content.decode()
    assert "Enable east…" in tested
    assert client.post("/clusters/east/state/enabled/").status_code == 302
    assert Cluster.objects.get(name="east").state == ClusterState.ENABLED


def test_a_failed_save_keeps_every_typed_field_and_says_the_file_must_be_chosen_again(
    client, root, catalog
):
    client.force_login(root)
    upload = SimpleUploadedFile("bad.kubeconfig", b"apiVersion: v1\nkind: Config\n")
    answer = client.post(
        "/clusters/register/",
        {
            "name": "west",
            "kubeconfig_file": upload,
            "namespace": "research",
            "prometheus_url": "http://127.0.0.1:9090",
            "token": "typed-secret-token",
        },
    )
    text = answer.content.decode()
    assert answer.status_code == 400
    assert "Kubeconfig file:" in text  # the field is named in the summary
    assert 'value="west"' in text and 'value="research"' in text
    assert 'value="typed-secret-token"' in text  # typed credentials are not lost
    assert "Choose the kubeconfig file again" in text
    assert not Cluster.objects.exists()


def test_the_parts_without_a_ca_name_the_missing_field(client, root, catalog):
    client.force_login(root)
    answer = client.post(
        "/clusters/register/",
        {"name": "west", "api_url": "https://west.k8s.test", "token": "t0ken"},
    )
    text = answer.content.decode()
    assert answer.status_code == 400 and "CA certificate (PEM):" in text
    assert 'value="t0ken"' in text and "Choose the kubeconfig file again" not in text


def test_drain_says_what_it_touches_before_it_happens(client, root, catalog, bob, vision):
    east = Cluster.objects.create(name="east", api_url="https://east.k8s.test")
    west = Cluster.objects.create(name="west", api_url="https://west.k8s.test")
    a100, t4 = GpuModel.objects.get(key="a100-80gb"), GpuModel.objects.get(key="t4")
    for cluster, model in ((east, a100), (east, t4), (west, t4)):
        Node.objects.create(
            cluster=cluster,
            name=f"{model.key}-0",
            gpu_model=model,
            gpu_allocatable=8,
            last_seen_at=timezone.now(),
        )
    JobFactory(team=vision, owner=bob, state=JobState.RUNNING, cluster=east, gpu_model=a100)
    JobFactory(team=vision, owner=bob, gpu_models=["a100-80gb"])  # only east has A100s
    JobFactory(team=vision, owner=bob, gpu_models=["t4"])  # west has T4s too
    client.force_login(root)
    confirm = client.get("/clusters/east/state/draining/").content.decode()
    assert "1 running, 1 queued affected." in confirm and "a100-80gb" in confirm
    assert Cluster.objects.get(name="east").state == ClusterState.ENABLED  # asked, not done
    assert client.post("/clusters/east/state/draining/").status_code == 302
    assert Cluster.objects.get(name="east").state == ClusterState.DRAINING
    client.force_login(bob)
    assert client.get("/clusters/east/state/draining/").status_code == 302  # to the login
    assert client.post("/clusters/east/state/enabled/").status_code == 302
    assert Cluster.objects.get(name="east").state == ClusterState.DRAINING


def test_delete_forgets_an_unused_cluster_and_refuses_one_with_jobs(client, root, catalog, vision):
    used = Cluster.objects.create(name="used", api_url="https://used.k8s.test")
    Cluster.objects.create(name="spare", api_url="https://spare.k8s.test")
    JobFactory(team=vision, state=JobState.SUCCEEDED, cluster=used)
    client.force_login(root)
    assert "Disable it" in client.get("/clusters/used/delete/").content.decode()
    refused = client.post("/clusters/used/delete/")
    assert refused.status_code == 409 and Cluster.objects.filter(name="used").exists()
    assert client.post("/clusters/spare/delete/").status_code == 302
    assert not Cluster.objects.filter(name="spare").exists()


def test_the_portal_s_own_page_names_are_refused_as_cluster_names(client, root, catalog):
    client.force_login(root)
    answer = client.post(
        "/clusters/register/",
        {"name": "register", "api_url": "https://x.k8s.test", "token": "t", "ca_pem": "x"},
    )
    assert answer.status_code == 400 and "Reserved: job-logs, register." in answer.content.decode()


def test_a_long_node_list_is_folded_behind_its_count(client, bob, catalog):
    cluster = Cluster.objects.create(name="big", api_url="https://big.k8s.test")
    for key, count in (("a100-80gb", 20), ("t4", 3)):
        model = GpuModel.objects.get(key=key)
        for i in range(count):
            Node.objects.create(
                cluster=cluster,
                name=f"{key}-{i}",
                gpu_model=model,
                gpu_allocatable=8,
                last_seen_at=timezone.now(),
            )
    client.force_login(bob)
    page = client.get("/clusters/big/").content.decode()
    assert '<details class="nodes"><summary>20 nodes</summary>' in page
    assert '<details class="nodes" open><summary>3 nodes</summary>' in page
