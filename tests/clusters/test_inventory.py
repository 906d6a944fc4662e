"""The GPU inventory: nodes read from kubesim into Node rows the scheduler consumes."""

from __future__ import annotations

import pytest

from clusters.inventory import inventory_sync
from clusters.models import Node
from clusters.selectors import cluster_capacity, largest_node_gpus
from portal.jobs.state import job_transition
from portal.models import JobState
from scheduling.models import GpuModel
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


def test_gpus_of_pods_the_portal_did_not_create_are_counted(sim, register):
    cluster = register(sim)
    foreign = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "someone-else", "namespace": "default"},
        "spec": {
            "minAvailable": 1,
            "schedulerName": "volcano",
            "tasks": [
                {
                    "name": "t",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "nodeSelector": {"gpu-type": "v100-32gb"},
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "busybox",
                                    "command": ["sleep", "600"],
                                    "resources": {"limits": {"nvidia.com/gpu": 3}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }
    sim.create(foreign)
    sim.advance(5)
    pods = sim.job_pods("default", "someone-else")
    assert pods and pods[0]["spec"].get("nodeName")
    inventory_sync(cluster=cluster)
    node = Node.objects.get(cluster=cluster, name=pods[0]["spec"]["nodeName"])
    assert node.gpus_used_by_others == 3
    assert (
        sum(Node.objects.filter(cluster=cluster).values_list("gpus_used_by_others", flat=True)) == 3
    )


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
    inventory_sync(cluster=cluster)
    by_model = {m.model: m for m in cluster_capacity(cluster)}
    a100_cap = by_model["a100-80gb"]
    assert (a100_cap.nodes, a100_cap.allocatable, a100_cap.planned) == (3, 20, 8)
    assert a100_cap.free == 4  # a100-0 is full, a100-1 is cordoned, a100-mig-0 has 4
    assert a100_cap.largest_free_block == 4
    assert by_model["unknown: NVIDIA-B300-SXM6-288GB"].known is False
    assert largest_node_gpus() == 14  # the MIG node's 1g.10gb slices


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
