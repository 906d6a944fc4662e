"""The cluster doctor against kubesim: a node whose device plugin stopped advertising GPUs and
a node labelled with the wrong case show up, explained, on the cluster page and in
``GET /api/v1/clusters/{name}/``; the platform admins hear of each new problem once; a broken
Volcano scheduler ConfigMap is found too. Nodes and the ConfigMap are edited through the
official client, as a kubelet, an admin's ``kubectl label`` or ``kubectl edit`` would."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from clusters.checkup import cluster_checkup
from clusters.inventory import inventory_sync
from clusters.models import ClusterFinding
from kubesim import KubeSim
from portal.models import Notification
from tests.clusters.conftest import kubeconfig_text, wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_fixed_findings_from_earlier_runs() -> None:
    """When each finding was last seen lives in the shared cache, and cluster ids come back in
    a new test database: an earlier run's "seen a minute ago" must not silence this run's news."""
    if hasattr(cache, "delete_pattern"):  # django-redis; the local-memory cache is per process
        cache.delete_pattern("clusters:doctor:reported:*")


@pytest.fixture(autouse=True)
def _nodes_joined_long_ago(settings) -> None:
    """kubesim's nodes join when the sim starts, seconds before each check; these tests are
    about nodes that have been up for long, so no node is given time to start (the grace has
    its own test below)."""
    settings.GPUPOOL_DOCTOR_NODE_GRACE_SECONDS = 0


@pytest.fixture
def core(sim: KubeSim) -> Iterator[k8s.CoreV1Api]:
    api = k8s_config.new_client_from_config_dict(sim.kubeconfig_dict())
    try:
        yield k8s.CoreV1Api(api)
    finally:
        api.close()


def _device_plugin_gone(core: k8s.CoreV1Api, node: str) -> None:
    """What a node looks like when the device plugin never registered: GFD's labels, but no
    nvidia.com/gpu in capacity or allocatable (a merge patch's null removes the key)."""
    core.patch_node_status(
        node,
        {"status": {"capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}}},
    )
    status = core.read_node(node).status
    assert "nvidia.com/gpu" not in (status.allocatable or {})


def _findings(cluster: Any) -> dict[str, ClusterFinding]:
    return {f.key: f for f in ClusterFinding.objects.filter(cluster=cluster)}


def test_a_gpu_node_without_gpus_and_a_mislabelled_node_are_explained_everywhere(
    sim, register, core, root, bob, api_as, client, django_capture_on_commit_callbacks
):
    cluster = register(sim)
    with django_capture_on_commit_callbacks(execute=True):
        assert inventory_sync(cluster=cluster).ok
    before = _findings(cluster)
    # kubesim's small pool has what a real one often has: MIG beside whole cards on a100-mig-0
    # and an unknown B300 product; Volcano's configuration is the chart's, so nothing there.
    assert {"mig-and-whole-gpus", "model-label-unknown:b300"} <= set(before)
    assert not [k for k in before if k.startswith(("volcano", "gpus-", "model-label-case"))]
    notices = Notification.objects.filter(user=root, kind="cluster.finding")
    assert notices.count() == 1  # one notice for the first check, listing what it found

    _device_plugin_gone(core, "a100-1")
    core.patch_node("v100-0", {"metadata": {"labels": {"gpu-type": "V100-32GB"}}})
    with django_capture_on_commit_callbacks(execute=True):
        assert inventory_sync(cluster=cluster).ok

    found = _findings(cluster)
    gone = found["gpus-not-advertised"]
    assert (gone.severity, gone.nodes) == ("error", ["a100-1"])
    case = found["model-label-case:V100-32GB"]
    assert case.severity == "warning" and case.nodes == ["v100-0"]
    assert "kubectl label node v100-0 gpu-type=v100-32gb --overwrite" in case.fix
    assert found["model-label-split:v100-32gb"].nodes == ["v100-0", "v100-1"]
    # A finding that stays keeps when it was first seen.
    assert found["mig-and-whole-gpus"].first_seen_at == before["mig-and-whole-gpus"].first_seen_at

    # The API: every logged-in user reads the findings, most serious first; no secret in them.
    for user in (bob, root):
        detail = api_as(user).get(f"/api/v1/clusters/{cluster.name}/").json()
        assert detail["doctor_checked_at"]
        first = detail["findings"][0]
        assert (first["code"], first["severity"], first["nodes"]) == (
            "gpus-not-advertised",
            "error",
            ["a100-1"],
        )
        assert "Insufficient nvidia.com/gpu" in first["explanation"]
        codes = [f["code"] for f in detail["findings"]]
        assert "model-label-case" in codes and "model-label-split" in codes
        assert "credential" not in str(detail["findings"]).lower()

    # The page says the same in words, with the fix.
    client.force_login(bob)
    page = client.get(f"/clusters/{cluster.name}/").content.decode()
    assert "Cluster doctor" in page
    assert "1 GPU node advertises no GPUs: a100-1" in page
    assert "gpu-type=V100-32GB differs only in case from the catalog&#x27;s v100-32gb" in page
    assert "kubectl label node v100-0 gpu-type=v100-32gb --overwrite" in page
    assert "Check now" not in page  # running it is for platform admins
    listing = client.get("/clusters/").content.decode()
    assert "doctor: 1 error, 4 warnings" in listing  # the list counts, the page explains

    # The admins heard of the two new problems in one notice, and only once.
    assert notices.count() == 2
    latest = notices.order_by("-id").first()
    assert latest.title == "Cluster sim: the cluster doctor found 3 new problems"
    assert "a100-1" in latest.message and "V100-32GB" in latest.message
    with django_capture_on_commit_callbacks(execute=True):
        assert inventory_sync(cluster=cluster).ok  # nothing new: no notice
    assert notices.count() == 2

    # Fixed: the findings go, and the page says what is left.
    core.patch_node("v100-0", {"metadata": {"labels": {"gpu-type": "v100-32gb"}}})
    client.force_login(root)
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(f"/clusters/{cluster.name}/doctor/")
    assert answer.status_code == 302 and answer["Location"].endswith("#doctor")
    after = _findings(cluster)
    assert "model-label-case:V100-32GB" not in after and "gpus-not-advertised" in after
    assert notices.count() == 2


def test_a_node_that_just_joined_without_gpus_yet_is_no_error_and_no_notice(
    sim, register, core, root, settings, django_capture_on_commit_callbacks
):
    """A scale-up: the node joined seconds ago (kubesim's nodes did), and its device plugin has
    not registered the GPUs yet. Said as info on the page; the admins are not paged for it."""
    settings.GPUPOOL_DOCTOR_NODE_GRACE_SECONDS = 600
    cluster = register(sim)
    _device_plugin_gone(core, "a100-1")
    with django_capture_on_commit_callbacks(execute=True):
        assert inventory_sync(cluster=cluster).ok
    found = _findings(cluster)
    assert "gpus-not-advertised" not in found
    starting = found["gpus-node-starting"]
    assert (starting.severity, starting.nodes) == ("info", ["a100-1"])
    notices = Notification.objects.filter(user=root, kind="cluster.finding")
    assert not [n for n in notices if "a100-1" in n.title + n.message]

    # Ten minutes on, it is the error, and the admins hear of it.
    settings.GPUPOOL_DOCTOR_NODE_GRACE_SECONDS = 0
    with django_capture_on_commit_callbacks(execute=True):
        assert inventory_sync(cluster=cluster).ok
    assert _findings(cluster)["gpus-not-advertised"].nodes == ["a100-1"]
    assert (
        notices.order_by("-id").first().title
        == "Cluster sim: 1 GPU node advertises no GPUs: a100-1"
    )


def test_a_scheduler_configmap_without_gang_is_an_error_and_a_missing_one_a_warning(
    sim, register, core
):
    cluster = register(sim)
    conf = core.read_namespaced_config_map("volcano-scheduler-configmap", "volcano-system")
    text = conf.data["volcano-scheduler.conf"]
    assert "name: gang" in text
    without_gang = "\n".join(line for line in text.splitlines() if "name: gang" not in line)
    core.patch_namespaced_config_map(
        "volcano-scheduler-configmap",
        "volcano-system",
        {"data": {"volcano-scheduler.conf": without_gang}},
    )
    result = cluster_checkup(cluster=cluster)
    assert result.ok
    gang = _findings(cluster)["volcano-no-gang"]
    assert gang.severity == "error" and "half a gang" in gang.explanation

    core.delete_namespaced_config_map("volcano-scheduler-configmap", "volcano-system")
    cluster_checkup(cluster=cluster)
    found = _findings(cluster)
    assert "volcano-no-gang" not in found
    unseen = found["volcano-config-unseen"]
    assert (unseen.severity, unseen.title) == (
        "warning",
        "Cannot see the Volcano scheduler configuration",
    )


def test_an_unreachable_cluster_keeps_the_last_findings(sim, register):
    cluster = register(sim)
    assert cluster_checkup(cluster=cluster).ok
    kept = set(_findings(cluster))
    sim.stop()
    result = cluster_checkup(cluster=cluster)
    assert not result.ok and "cannot be read" in result.message
    assert set(_findings(cluster)) == kept


class FakePrometheus:
    """Answers every instant query with ``result`` (the DCGM presence counts per host)."""

    def __init__(self) -> None:
        self.result: list[dict[str, Any]] = []
        self.status = 200
        self.queries: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                fake.queries.append(parse_qs(url.query).get("query", [""])[0])
                if url.path != "/api/v1/query" or fake.status != 200:
                    self.send_response(fake.status if fake.status != 200 else 404)
                    self.end_headers()
                    return
                body = {
                    "status": "success",
                    "data": {"resultType": "vector", "result": fake.result},
                }
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hosts(self, counts: dict[str, int]) -> None:
        self.result = [
            {"metric": {"Hostname": host}, "value": [time.time(), str(n)]}
            for host, n in counts.items()
        ]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus(settings) -> Iterator[FakePrometheus]:
    settings.GPUPOOL_PROMETHEUS_TIMEOUT_SECONDS = 1
    fake = FakePrometheus()
    yield fake
    fake.stop()


def test_dcgm_data_missing_for_some_nodes_or_all_where_prometheus_is_set(
    sim, register, prometheus, bob, root, api_as, client
):
    cluster = register(sim, prometheus_url=prometheus.url)
    gpu_nodes = ["a100-0", "a100-1", "a100-mig-0", "mystery-0", "t4-0", "t4-1", "v100-0", "v100-1"]
    prometheus.hosts({name: 8 for name in gpu_nodes})
    assert cluster_checkup(cluster=cluster).ok
    assert not [k for k in _findings(cluster) if k.startswith("dcgm")]
    assert "DCGM_FI_DEV_GPU_UTIL" in prometheus.queries[-1]

    prometheus.hosts({name: 8 for name in gpu_nodes if not name.startswith("t4")})
    cluster_checkup(cluster=cluster)
    silent = _findings(cluster)["dcgm-nodes-silent"]
    assert (silent.severity, silent.nodes) == ("warning", ["t4-0", "t4-1"])
    assert silent.title == "2 GPU nodes report no DCGM metrics: t4-0, t4-1"

    prometheus.hosts({})
    cluster_checkup(cluster=cluster)
    none = _findings(cluster)["dcgm-no-data"]
    assert none.title == "Prometheus has no DCGM exporter data" and none.nodes == gpu_nodes

    prometheus.status = 503
    cluster_checkup(cluster=cluster)
    unreadable = _findings(cluster)["dcgm-prometheus-unreadable"]
    assert "HTTP 503" not in unreadable.explanation and "HTTP 503" in unreadable.detail
    assert prometheus.url not in unreadable.explanation  # the URL is for platform admins

    # Prometheus's own error (it can name its host and address) reaches platform admins only:
    # a team member reads what it means, an admin also reads the error, in the API and page.
    def api_finding(user: Any) -> dict[str, Any]:
        detail = api_as(user).get(f"/api/v1/clusters/{cluster.name}/").json()
        listing = api_as(user).get("/api/v1/clusters/").json()
        (listed,) = [c for c in listing if c["name"] == cluster.name]
        assert listed["findings"] == detail["findings"]
        (found,) = [f for f in detail["findings"] if f["code"] == "dcgm-prometheus-unreadable"]
        return found

    member = api_finding(bob)
    assert "detail" not in member and "HTTP 503" not in json.dumps(member)
    assert "platform admins see the error" in member["explanation"]
    assert "HTTP 503" in api_finding(root)["detail"]
    client.force_login(bob)
    page = client.get(f"/clusters/{cluster.name}/").content.decode()
    assert "The cluster&#x27;s Prometheus cannot be read" in page and "HTTP 503" not in page
    client.force_login(root)
    page = client.get(f"/clusters/{cluster.name}/").content.decode()
    assert "HTTP 503" in page


def test_no_prometheus_url_no_dcgm_question(sim, register):
    cluster = register(sim)
    assert cluster_checkup(cluster=cluster).ok
    assert not [k for k in _findings(cluster) if k.startswith("dcgm")]


def test_a_cluster_registered_in_the_page_is_checked_at_once_in_the_background(
    sim, catalog, root, client, celery_worker
):
    client.force_login(root)
    upload = SimpleUploadedFile("east.kubeconfig", kubeconfig_text(sim).encode())
    answer = client.post("/clusters/register/", {"name": "east", "kubeconfig_file": upload})
    assert answer.status_code == 302
    # The worker reads the inventory, and the doctor looks, without waiting for the beat.
    found = wait_for(
        lambda: set(
            ClusterFinding.objects.filter(cluster__name="east").values_list("key", flat=True)
        )
    )
    assert "model-label-unknown:b300" in found
    page = client.get("/clusters/east/").content.decode()
    assert "gpu-type=b300 is not a GPU model the catalog knows" in page
    assert Notification.objects.filter(user=root, kind="cluster.finding").exists()
