"""The GPU inventory: nodes read from kubesim into Node rows the scheduler consumes."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from clusters.inventory import inventory_sync
from clusters.manifests import job_manifest
from clusters.models import Node
from clusters.selectors import cluster_capacity, largest_node_gpus
from portal.jobs.state import job_transition
from portal.models import JobState
from rules import volcano
from scheduling.models import GpuModel
from tests.clusters.conftest import wait_for
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def _rows(cluster):
    return {
        (n.name, n.gpu_resource): n
        for n in Node.objects.filter(cluster=cluster).select_related("gpu_model")
    }


def test_nodes_map_to_catalog_models_by_the_cluster_label(sim, register):
    cluster = register(sim)
    result = inventory_sync(cluster=cluster)
    assert result.ok, result.message
    rows = _rows(cluster)
    assert rows[("a100-0", "nvidia.com/gpu")].gpu_model.key == "a100-80gb"
    assert rows[("a100-0", "nvidia.com/gpu")].gpu_allocatable == 8
    assert rows[("v100-1", "nvidia.com/gpu")].gpu_model.key == "v100-32gb"
    assert rows[("t4-0", "nvidia.com/gpu")].gpu_model.key == "t4"
    assert not any(name.startswith("cpu") for name, _ in rows)  # no GPUs, no row
    assert result.message == "8 GPU nodes (10 GPU resources, 1 unknown products)"


def test_mig_slices_are_rows_of_their_own_mapped_to_slice_models(sim, register):
    cluster = register(sim)
    inventory_sync(cluster=cluster)
    rows = _rows(cluster)
    whole = rows[("a100-mig-0", "nvidia.com/gpu")]
    small = rows[("a100-mig-0", "nvidia.com/mig-1g.10gb")]
    large = rows[("a100-mig-0", "nvidia.com/mig-3g.40gb")]
    assert (whole.gpu_model.key, whole.gpu_allocatable) == ("a100-80gb", 4)
    assert (small.gpu_model.key, small.gpu_allocatable) == ("a100-80gb-mig-1g.10gb", 14)
    assert (large.gpu_model.key, large.gpu_allocatable) == ("a100-80gb-mig-3g.40gb", 4)
    assert whole.mig_resources == {"nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4}


def _mig_single_pool(name, model, slices, product):
    """Nodes whose GPUs are all cut into one MIG profile (device plugin strategy ``single``):
    every slice is a ``nvidia.com/gpu``, and GFD's product names the slice. The node pool's
    own label still names the card (``gpu-type=<model>``): partitioning does not change it."""
    mig = {"nvidia.com/mig.strategy": "single", "nvidia.com/mig.capable": "true"}
    return {"name": name, "count": 1, "gpuModel": model, "gpus": slices, "product": product,
            "labels": mig}  # fmt: skip


MIG_SINGLE = {
    "name": "mig-single",
    "namespaces": ["gpupool"],
    "nodePools": [
        {"name": "a100", "count": 1, "gpuModel": "a100-80gb", "gpus": 8},
        _mig_single_pool("a100-sliced", "a100-80gb", 28, "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"),
        _mig_single_pool("a100-40-sliced", "a100-40gb", 14, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"),
    ],
}


@pytest.mark.parametrize("gpu_label", ["gpu-type", "example.com/not-on-the-nodes"],
                         ids=["the cluster label names the card", "GFD labels only"])  # fmt: skip
def test_mig_single_nodes_count_slices_never_whole_gpus(register, gpu_label):
    """A slice the catalog knows maps to its slice model; one it does not know is kept and
    shown by its product. Neither may pass for whole GPUs of the card: a job needing 80 GB
    would be placed on 10 GB slices."""
    from kubesim import KubeSim

    with KubeSim(MIG_SINGLE, clock_speed=0) as sim:
        cluster = register(sim, gpu_label=gpu_label)
        result = inventory_sync(cluster=cluster)
        assert result.ok, result.message
        rows = _rows(cluster)
        assert {name for name, _ in rows} == {"a100-0", "a100-sliced-0", "a100-40-sliced-0"}
        known = rows[("a100-sliced-0", "nvidia.com/gpu")]
        assert known.gpu_model.key == "a100-80gb-mig-1g.10gb"
        assert (known.gpu_allocatable, known.mig_resources) == (28, {})
        assert known.gpu_product == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
        unknown = rows[("a100-40-sliced-0", "nvidia.com/gpu")]
        assert unknown.gpu_model is None
        assert unknown.gpu_product == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
        assert unknown.gpu_allocatable == 14
        assert rows[("a100-0", "nvidia.com/gpu")].gpu_model.key == "a100-80gb"
        assert result.message == "3 GPU nodes (3 GPU resources, 1 unknown products)"

        by_model = {m.model: (m.known, m.allocatable) for m in cluster_capacity(cluster)}
        assert by_model == {
            "a100-80gb": (True, 8),
            "a100-80gb-mig-1g.10gb": (True, 28),
            "unknown: NVIDIA-A100-SXM4-40GB-MIG-1g.5gb": (False, 14),
        }


def test_a_gpu_with_mig_off_in_a_single_strategy_cluster_stays_a_whole_gpu(register):
    """GFD labels every node of a cluster set to the single strategy, MIG on or not: the
    label alone must not turn whole GPUs into slices (or, unknown, into no capacity)."""
    from kubesim import KubeSim

    pool = {
        "name": "a100",
        "count": 1,
        "gpuModel": "a100-80gb",
        "gpus": 8,
        "product": "NVIDIA-A100-SXM4-80GB",
        "labels": {"nvidia.com/mig.strategy": "single"},
    }
    config = {"name": "mig-off", "namespaces": ["gpupool"], "nodePools": [pool]}  # fmt: skip
    with KubeSim(config, clock_speed=0) as sim:
        cluster = register(sim)
        assert inventory_sync(cluster=cluster).ok
    row = _rows(cluster)[("a100-0", "nvidia.com/gpu")]
    assert (row.gpu_model.key, row.gpu_allocatable) == ("a100-80gb", 8)


def test_an_unknown_product_is_kept_and_shown_not_dropped(sim, register):
    cluster = register(sim)
    inventory_sync(cluster=cluster)
    mystery = _rows(cluster)[("mystery-0", "nvidia.com/gpu")]
    assert mystery.gpu_model is None
    assert mystery.gpu_product == "NVIDIA-B300-SXM6-288GB"
    assert mystery.gpu_allocatable == 2


def test_gfd_product_labels_are_the_fallback_for_the_cluster_label(sim, register):
    cluster = register(sim, gpu_label="example.com/gpu-model")  # nodes do not carry it
    inventory_sync(cluster=cluster)
    rows = _rows(cluster)
    assert rows[("a100-1", "nvidia.com/gpu")].gpu_model.key == "a100-80gb"
    assert rows[("v100-0", "nvidia.com/gpu")].gpu_model.key == "v100-32gb"
    assert rows[("t4-1", "nvidia.com/gpu")].gpu_model.key == "t4"


def test_a_product_label_added_to_the_catalog_maps_at_the_next_sync(sim, register):
    cluster = register(sim, gpu_label="example.com/none")
    GpuModel.objects.filter(key="t4").update(product_labels=[])
    inventory_sync(cluster=cluster)
    assert _rows(cluster)[("t4-0", "nvidia.com/gpu")].gpu_model is None
    GpuModel.objects.filter(key="t4").update(product_labels=["Tesla-T4"])
    inventory_sync(cluster=cluster)
    assert _rows(cluster)[("t4-0", "nvidia.com/gpu")].gpu_model.key == "t4"


def test_cordoned_and_not_ready_nodes_are_not_schedulable(sim, register):
    cluster = register(sim)
    sim.cordon("a100-1")
    sim.node_not_ready("v100-0")
    inventory_sync(cluster=cluster)
    rows = _rows(cluster)
    assert rows[("a100-1", "nvidia.com/gpu")].schedulable is False
    assert rows[("a100-0", "nvidia.com/gpu")].schedulable is True
    assert rows[("v100-0", "nvidia.com/gpu")].ready is False
    sim.uncordon("a100-1")
    inventory_sync(cluster=cluster)
    assert _rows(cluster)[("a100-1", "nvidia.com/gpu")].schedulable is True


def test_a_gpu_taint_the_pods_tolerate_does_not_block(sim_config, register):
    from kubesim import KubeSim

    config = {
        **sim_config,
        "nodePools": [
            {"name": "tainted", "count": 1, "gpuModel": "t4", "gpus": 1,
             "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
            {"name": "reserved", "count": 1, "gpuModel": "t4", "gpus": 1,
             "taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
        ],
    }  # fmt: skip
    with KubeSim(config, clock_speed=0) as sim:
        cluster = register(sim)
        inventory_sync(cluster=cluster)
        rows = _rows(cluster)
        assert rows[("tainted-0", "nvidia.com/gpu")].schedulable is True
        assert rows[("reserved-0", "nvidia.com/gpu")].schedulable is False


def _vcjob(name, gpus, *, node=None, model="v100-32gb", labels=None):
    """A one-pod Volcano Job some other client runs: ``gpus`` whole GPUs, pinned to ``node``
    (by hostname) when given, else on any node of ``model``."""
    selector = {"kubernetes.io/hostname": node} if node else {"gpu-type": model}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "minAvailable": 1,
            "schedulerName": "volcano",
            "tasks": [
                {
                    "name": "t",
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": dict(labels or {})},
                        "spec": {
                            "nodeSelector": selector,
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "busybox",
                                    "command": ["sleep", "600"],
                                    "resources": {"limits": {"nvidia.com/gpu": gpus}},
                                }
                            ],
                        },
                    },
                }
            ],
        },
    }


def _running_on(sim, namespace, name):
    """The node the job's only pod runs on (after letting it start)."""
    sim.advance(5)
    pods = sim.job_pods(namespace, name)
    assert pods and pods[0]["spec"].get("nodeName"), f"{namespace}/{name} did not start"
    assert pods[0]["status"]["phase"] == "Running"
    return pods[0]["spec"]["nodeName"]


def test_gpus_of_pods_the_portal_did_not_create_are_counted(sim, register):
    cluster = register(sim)
    sim.create(_vcjob("someone-else", 3))
    node = _running_on(sim, "default", "someone-else")
    inventory_sync(cluster=cluster)
    assert Node.objects.get(cluster=cluster, name=node).gpus_used_by_others == 3
    assert (
        sum(Node.objects.filter(cluster=cluster).values_list("gpus_used_by_others", flat=True)) == 3
    )


def test_the_portals_own_pods_are_not_counted_as_used_by_others(sim, cluster, admit):
    """The portal's jobs are charged by their node plans; counting their pods as foreign as
    well would take their GPUs twice and leave free GPUs idle."""
    job = admit(cluster, replicas=1, gpus_per_replica=2)
    namespace, manifest = job_manifest(job)  # exactly what a dispatch creates
    sim.create(manifest, namespace=namespace)
    shared = _running_on(sim, namespace, manifest["metadata"]["name"])
    pod = sim.job_pods(namespace, manifest["metadata"]["name"])[0]
    assert pod["metadata"]["labels"][volcano.LABEL_MANAGED_BY] == volcano.MANAGED_BY
    assert pod["metadata"]["labels"][volcano.LABEL_JOB_ID] == str(job.public_id)
    # A foreign pod beside it, and one that only looks like ours (no job id: not the portal's).
    sim.create(_vcjob("foreign", 2, node=shared))
    assert _running_on(sim, "default", "foreign") == shared
    lookalike = {volcano.LABEL_MANAGED_BY: volcano.MANAGED_BY}
    sim.create(_vcjob("lookalike", 1, node="v100-0", labels=lookalike))
    assert _running_on(sim, "default", "lookalike") == "v100-0"

    assert inventory_sync(cluster=cluster).ok
    used = {
        name: n
        for name, n in Node.objects.filter(cluster=cluster, gpu_resource="nvidia.com/gpu")
        .exclude(gpus_used_by_others=0)
        .values_list("name", "gpus_used_by_others")
    }
    assert used == {shared: 2, "v100-0": 1}
    # The cluster page's figures: the job's 2 GPUs are held by its plan, not by "others".
    a100 = {m.model: m for m in cluster_capacity(cluster)}["a100-80gb"]
    assert (a100.allocatable, a100.used_by_others, a100.planned, a100.free) == (20, 2, 2, 16)


def test_capacity_per_model_counts_plans_and_the_largest_free_block(sim, register, bob, vision):
    cluster = register(sim)
    inventory_sync(cluster=cluster)
    a100 = GpuModel.objects.get(key="a100-80gb")
    job = JobFactory(team=vision, owner=bob, replicas=2, gpus_per_replica=4)
    job_transition(
        job_id=job.pk,
        expected=JobState.QUEUED,
        to=JobState.ADMITTED,
        reason="Admitted",
        updates={"cluster_id": cluster.pk, "gpu_model_id": a100.pk, "node_plan": ["a100-0"] * 2},
    )
    sim.cordon("a100-1")
    sim.create(_vcjob("notebook", 1, node="a100-mig-0"))
    _running_on(sim, "default", "notebook")
    _report_unhealthy_gpu(sim, "a100-mig-0", allocatable=3)  # 4 whole GPUs, one unhealthy
    inventory_sync(cluster=cluster)
    by_model = {m.model: m for m in cluster_capacity(cluster)}
    a100_cap = by_model["a100-80gb"]
    assert (a100_cap.nodes, a100_cap.total, a100_cap.allocatable) == (3, 20, 19)
    assert (a100_cap.used_by_others, a100_cap.planned, a100_cap.unusable) == (1, 8, 8)
    # a100-0 is full (the plan), a100-1 is cordoned, a100-mig-0 has 3 - 1 foreign = 2
    assert a100_cap.free == 2
    assert a100_cap.largest_free_block == 2
    assert by_model["unknown: NVIDIA-B300-SXM6-288GB"].known is False
    assert largest_node_gpus() == 14  # the MIG node's 1g.10gb slices


def _report_unhealthy_gpu(sim, node, *, allocatable):
    """What the device plugin does when a GPU fails its health check: the node's allocatable
    drops below its capacity (written through the official client, like a kubelet)."""
    api = k8s_config.new_client_from_config_dict(sim.kubeconfig_dict())
    try:
        k8s.CoreV1Api(api).patch_node_status(
            node, {"status": {"allocatable": {"nvidia.com/gpu": str(allocatable)}}}
        )
    finally:
        api.close()
    status = sim.get("nodes", node)["status"]
    assert status["allocatable"]["nvidia.com/gpu"] == str(allocatable)
    assert status["capacity"]["nvidia.com/gpu"] != str(allocatable)


def test_an_unreachable_cluster_keeps_the_last_inventory_and_says_why(sim, register):
    cluster = register(sim)
    inventory_sync(cluster=cluster)
    sim.stop()
    result = inventory_sync(cluster=cluster)
    assert not result.ok and "unreachable" in result.message
    cluster.refresh_from_db()
    assert "unreachable" in cluster.inventory_error
    assert Node.objects.filter(cluster=cluster).count() == 10


def test_the_cluster_page_shows_gpu_nodes_by_model(sim, register, client, bob,
                                                   django_assert_max_num_queries):  # fmt: skip
    cluster = register(sim)
    inventory_sync(cluster=cluster)
    client.force_login(bob)
    with django_assert_max_num_queries(8):
        page = client.get(f"/clusters/{cluster.name}/").content.decode()
    assert "a100-80gb-mig-1g.10gb" in page and "v100-32gb" in page
    assert "unknown: NVIDIA-B300-SXM6-288GB" in page and "not in the catalog" in page
    assert sim.url not in page  # connection details are for staff
    listing = client.get("/clusters/").content.decode()
    assert "20 × a100-80gb" in listing


# ---------------------------------------------------------------------------------------------
# What triggers a sync: beat's periodic task, the API for staff, the management command
# ---------------------------------------------------------------------------------------------
def _gpu_rows(cluster):
    return Node.objects.filter(cluster=cluster).count()


def _schedulable(cluster, node):
    return Node.objects.get(cluster=cluster, name=node, gpu_resource="nvidia.com/gpu").schedulable


@pytest.fixture
def published():
    """Names of the tasks this process publishes while the test runs."""
    from celery.signals import after_task_publish

    names: list[str] = []

    def seen(sender=None, **_):
        names.append(sender)

    after_task_publish.connect(seen, weak=False)
    yield names
    after_task_publish.disconnect(seen)


def test_beat_runs_the_inventory_sync_of_every_cluster_periodically(settings):
    entries = [
        e
        for e in settings.CELERY_BEAT_SCHEDULE.values()
        if e["task"] == "clusters.sync_all_inventories"
    ]
    assert [e["schedule"] for e in entries] == [settings.GPUPOOL_INVENTORY_INTERVAL]


@pytest.mark.django_db(transaction=True)
def test_the_periodic_sync_reads_each_cluster_but_a_disabled_one(sim, register, celery_worker):
    from clusters.tasks import sync_all_inventories

    cluster = register(sim)
    disabled = register(sim, name="retired", state="disabled")
    assert _gpu_rows(cluster) == _gpu_rows(disabled) == 0
    assert sync_all_inventories() == 1  # the task body beat runs: one sync per cluster
    assert wait_for(lambda: _gpu_rows(cluster) == 10), celery_worker.output()[-3000:]
    cluster.refresh_from_db()
    assert cluster.inventory_synced_at is not None and cluster.inventory_error == ""

    sim.cordon("a100-1")  # the next tick sees what changed on the cluster
    sync_all_inventories.delay()  # as beat sends it
    assert wait_for(lambda: not _schedulable(cluster, "a100-1")), celery_worker.output()[-3000:]
    assert _gpu_rows(disabled) == 0
    disabled.refresh_from_db()
    assert disabled.inventory_synced_at is None


@pytest.mark.django_db(transaction=True)
def test_staff_can_ask_for_a_sync_through_the_api_and_members_cannot(
    sim, register, celery_worker, api_as, root, bob, published
):
    cluster = register(sim)
    url = f"/api/v1/clusters/{cluster.name}/sync/"
    refused = api_as(bob).post(url)
    assert refused.status_code == 403
    assert refused.json()["message"] == "Only platform admins manage clusters."
    assert not [n for n in published if n.startswith("clusters.sync")], "nothing was enqueued"
    assert _gpu_rows(cluster) == 0

    accepted = api_as(root).post(url)
    assert (accepted.status_code, accepted.json()) == (202, {"message": "Sync requested."})
    assert "clusters.sync_inventory" in published
    assert wait_for(lambda: _gpu_rows(cluster) == 10), celery_worker.output()[-3000:]

    sim.cordon("a100-1")
    assert api_as(root).post(url).status_code == 202
    assert wait_for(lambda: not _schedulable(cluster, "a100-1")), celery_worker.output()[-3000:]
    assert api_as(root).post("/api/v1/clusters/nowhere/sync/").status_code == 404


def test_the_sync_cluster_command_reads_the_named_clusters_inventory(sim, register):
    from io import StringIO

    from django.core.management import call_command

    cluster = register(sim)
    other = register(sim, name="other")
    out = StringIO()
    call_command("sync_cluster", cluster.name, stdout=out)
    assert "sim: inventory: 8 GPU nodes (10 GPU resources, 1 unknown products)" in out.getvalue()
    assert (_gpu_rows(cluster), _gpu_rows(other)) == (10, 0)
    assert _rows(cluster)[("v100-0", "nvidia.com/gpu")].ready is True

    sim.node_not_ready("v100-0")
    call_command("sync_cluster", stdout=StringIO())  # no name: every cluster
    assert _rows(cluster)[("v100-0", "nvidia.com/gpu")].ready is False
    assert _gpu_rows(other) == 10
