"""The submit form's preview: the matching models the pool has, in the order they are tried,
the first choice, which are full now, and the MIG rule; the same answer over REST."""

from __future__ import annotations

import pytest

from clusters.models import ClusterState, Node
from portal.jobs.services import job_submit
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel
from tests.conftest import job_body
from tests.dashboards.conftest import kubesim_cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def east(kubesim_cluster):  # noqa: F811
    """kubesim's small pool: 2 x 8 A100, an A100 with 4 whole GPUs and MIG slices,
    2 x 4 V100, 3 x 1 T4."""
    return kubesim_cluster("east")


def _preview(client, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return client.get(f"/api/v1/gpu-models/match/?{query}").json()


def test_only_models_the_pool_has_are_listed_with_the_first_marked(api_as, bob, east):
    got = _preview(api_as(bob), min_gpu_memory_gib=12)
    assert [m["model"] for m in got["pool"]] == ["t4", "v100-32gb", "a100-80gb"]
    assert [m["tried_first"] for m in got["pool"]] == [True, False, False]
    assert "l4" in got["absent"] and "h100-sxm" in got["absent"]
    assert got["matched"][:2] == ["t4", "rtx-4090"]  # the catalog's answer is unchanged


def test_full_now_follows_the_gang_and_the_free_gpus(api_as, bob, east):
    got = _preview(api_as(bob), min_gpu_memory_gib=12, replicas=2, gpus_per_replica=4)
    room = {m["model"]: m for m in got["pool"]}
    assert room["t4"]["full_now"] and not room["t4"]["fits_ever"]  # 1-GPU nodes
    assert not room["v100-32gb"]["full_now"] and not room["a100-80gb"]["full_now"]
    Node.objects.filter(cluster=east, gpu_model__key="v100-32gb").update(gpus_used_by_others=3)
    got = _preview(api_as(bob), min_gpu_memory_gib=12, replicas=2, gpus_per_replica=4)
    room = {m["model"]: m for m in got["pool"]}
    assert room["v100-32gb"]["full_now"] and room["v100-32gb"]["fits_ever"]
    assert room["v100-32gb"]["free_gpus"] == 2 and room["v100-32gb"]["largest_free_block"] == 1


def test_a_portal_job_holding_gpus_counts(api_as, bob, vision, east, quota):
    quota(vision, "v100-32gb", nominal=8)
    job_submit(user=bob, data=job_body(gpu_models=["v100-32gb"], min_gpu_memory_gib=None))
    assert run_cycle().admitted
    got = _preview(api_as(bob), gpu_models="v100-32gb", replicas=2, gpus_per_replica=4)
    assert got["pool"][0]["full_now"] and got["pool"][0]["free_gpus"] == 0


def test_a_whole_gpu_requirement_leaves_mig_slices_out_and_says_so(api_as, client, bob, east):
    got = _preview(api_as(bob), min_gpu_memory_gib=8)
    assert got["pool"][0]["model"] == "t4"  # not the cheaper 1g.10gb slice
    assert set(got["slices_left_out"]) == {"a100-80gb-mig-1g.10gb", "a100-80gb-mig-3g.40gb"}
    named = _preview(api_as(bob), gpu_models="a100-80gb-mig-1g.10gb")
    assert [m["model"] for m in named["pool"]] == ["a100-80gb-mig-1g.10gb"]
    client.force_login(bob)
    page = client.get("/jobs/new/match/?requirement=constraints&min_gpu_memory_gib=8")
    html = page.content.decode()
    assert 'id="mig-rule"' in html and "By model list" in html


def test_without_fallback_only_the_first_choice_is_tried(api_as, client, bob, east):
    got = _preview(api_as(bob), min_gpu_memory_gib=20, allow_fallback="false")
    assert got["matched"][0] == "rtx-4090" and "rtx-4090" in got["absent"]
    assert not any(m["tried"] or m["tried_first"] for m in got["pool"])
    client.force_login(bob)
    html = client.get(
        "/jobs/new/match/?requirement=constraints&min_gpu_memory_gib=20"
    ).content.decode()  # the form sends the checkbox only when ticked
    assert "fallback is off" in html and "not tried" in html


def test_the_preview_page_marks_first_and_full(client, bob, east):
    Node.objects.filter(cluster=east, gpu_model__key="t4").update(gpus_used_by_others=1)
    client.force_login(bob)
    html = client.get(
        "/jobs/new/match/?requirement=constraints&min_gpu_memory_gib=12&allow_fallback=on"
    ).content.decode()
    t4 = html[html.index('data-model="t4"') : html.index("</li>", html.index('data-model="t4"'))]
    assert "tried first" in t4 and "full now" in t4
    assert "no cluster has" in html and "l4" in html
    by_models = client.get(
        "/jobs/new/match/?requirement=models&gpu_models=v100-32gb&gpu_models=t4"
        "&gpu_models_order=v100-32gb,t4&selection_policy=ordered&allow_fallback=on"
    ).content.decode()
    assert by_models.index('data-model="v100-32gb"') < by_models.index('data-model="t4"')


def test_a_draining_cluster_is_not_the_pool(api_as, bob, east):
    east.state = ClusterState.DRAINING
    east.save()
    got = _preview(api_as(bob), min_gpu_memory_gib=12)
    assert got["pool"] == [] and "t4" in got["absent"]


def test_the_submit_form_greys_models_no_cluster_has(client, bob, east):
    client.force_login(bob)
    html = client.get("/jobs/new/").content.decode()
    assert '<option value="t4">' in html
    h100 = GpuModel.objects.get(key="h100-sxm")
    assert (
        f'<option value="h100-sxm" disabled>{h100.display_name} (h100-sxm) — no cluster has it'
        in html
    )
