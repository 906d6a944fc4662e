"""Asking for a shared GPU through the form, the preview and the REST API.

The pools are Node rows as the inventory writes them for shared nodes (GiB of the catalog's
shared pool); kubesim's side is in ``tests/clusters/test_shared_gpus.py``.
"""

from __future__ import annotations

import pytest

from portal.models import Job
from scheduling.catalog import shared_pool_create
from scheduling.models import GpuModel
from tests.builders import gpu_nodes
from tests.portal.test_pages import FORM

pytestmark = pytest.mark.django_db


@pytest.fixture
def pools(catalog):
    """east: 2 nodes of 8 whole A100s, and one A100 node shared as 2 x 80 GiB."""
    shared_pool_create(card=GpuModel.objects.get(key="a100-80gb"))
    gpu_nodes("east", "a100-80gb", 2, 8)
    return gpu_nodes("east", "a100-80gb-shared", 1, 160, gpu_resource="volcano.sh/vgpu-memory")


def _preview(client, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return client.get(f"/api/v1/gpu-models/match/?{query}").json()


def test_the_preview_of_a_share_lists_shared_pools_only_with_free_gib(api_as, bob, pools):
    got = _preview(api_as(bob), gpu_memory_gib=20, replicas=2)
    assert got["shared"] is True
    assert [m["model"] for m in got["pool"]] == ["a100-80gb-shared"]
    room = got["pool"][0]
    assert (room["free_gpus"], room["full_now"], room["fits_ever"]) == (160, False, True)
    assert got["gang"] == {"replicas": 2, "gpus_per_replica": 20}


def test_the_preview_of_whole_gpus_never_lists_a_shared_pool(api_as, bob, pools):
    got = _preview(api_as(bob), gpus_per_replica=2)
    assert "a100-80gb-shared" not in [m["model"] for m in got["pool"]]
    assert got["shared"] is False


def test_a_gang_of_shares_larger_than_the_shared_nodes_is_never_going_to_fit(api_as, bob, pools):
    assert _preview(api_as(bob), gpu_memory_gib=80, replicas=2)["pool"][0]["fits_ever"] is True
    got = _preview(api_as(bob), gpu_memory_gib=80, replicas=3)  # 240 GiB on a 160 GiB node
    assert got["pool"][0]["fits_ever"] is False


def test_the_form_submits_a_share_and_the_job_page_says_so(client, bob, pools):
    client.force_login(bob)
    form = {**FORM, "gpus_per_replica": "1", "gpu_memory_gib": "20", "gpu_cores_percent": "50"}
    form.pop("min_gpu_memory_gib")
    form.pop("requires_bf16")
    answer = client.post("/jobs/new/", form)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    job = Job.objects.get()
    assert (job.gpu_memory_gib, job.gpu_cores_percent, job.gpus_per_replica) == (20, 50, 20)
    page = client.get(answer["Location"]).content.decode()
    assert "20 GiB shared GPU, 50 % compute" in page
    listing = client.get("/jobs/").content.decode()
    assert "2 × 20 GiB <small>shared</small>" in listing


def test_the_form_refuses_a_share_larger_than_a_device_naming_the_field(client, bob, pools):
    client.force_login(bob)
    form = {**FORM, "gpus_per_replica": "1", "gpu_memory_gib": "100"}
    form.pop("min_gpu_memory_gib")
    answer = client.post("/jobs/new/", form)
    assert answer.status_code == 400
    assert 'id="id_gpu_memory_gib_error"' in answer.content.decode()
    assert Job.objects.count() == 0


def test_the_api_takes_a_share_and_shows_it(api_as, bob, pools):
    api = api_as(bob)
    body = {
        "team": "vision",
        "name": "llm-serve",
        "kind": "inference",
        "image": "vllm/vllm-openai:v0.6.0",
        "gpu_memory_gib": 24,
        "gpu_cores_percent": 30,
    }
    answer = api.post("/api/v1/jobs/", body, format="json")
    assert answer.status_code == 201, answer.json()
    data = answer.json()
    assert (data["gpu_memory_gib"], data["gpu_cores_percent"], data["gpus_per_replica"]) == (
        24,
        30,
        24,
    )
    bad = api.post("/api/v1/jobs/", {**body, "gpu_cores_percent": 0}, format="json")
    assert bad.status_code == 400
    assert "gpu_cores_percent" in bad.json()["extra"]["fields"]


def test_the_pool_overview_shows_a_shared_pool_in_gib_with_its_compute(client, bob, pools):
    from scheduling.cycle import run_cycle
    from scheduling.models import Quota

    vision = bob.memberships.first().team
    Quota.objects.create(team=vision, gpu_model=GpuModel.objects.get(key="a100-80gb-shared"),
                         nominal=160)  # fmt: skip
    api_body = {"team": "vision", "name": "serve", "kind": "inference",
                "image": "vllm/vllm-openai:v0.6.0", "replicas": 2, "gpu_memory_gib": 20,
                "gpu_cores_percent": 50}  # fmt: skip
    from portal.jobs.services import job_submit

    job_submit(user=bob, data=api_body)
    assert run_cycle().admitted
    client.force_login(bob)
    page = client.get("/").content.decode()
    card = page[page.index('id="model-a100-80gb-shared"') :]
    card = card[: card.index("</li>")]
    assert "Memory in use:" in card
    assert '<strong data-figure="allocated">40</strong> of 160 GiB' in card
    assert '<strong data-figure="compute">50 %</strong> of 2 devices' in card  # 2 x 50 % of 200 %
    assert "120 GiB" in card  # free
    totals = page[page.index('aria-label="Totals"') :]
    assert '<dd data-total="gpus_allocatable">16</dd>' in totals  # GPUs only, not GiB


def test_a_share_resubmitted_asks_for_the_same_share(api_as, bob, pools):
    api = api_as(bob)
    body = {"team": "vision", "name": "nb", "image": "jupyter/base-notebook:2024-05-01",
            "gpu_memory_gib": 12, "gpu_cores_percent": 25, "replicas": 1}  # fmt: skip
    first = api.post("/api/v1/jobs/", body, format="json").json()
    again = api.post("/api/v1/jobs/", {"from_job": first["id"]}, format="json")
    assert again.status_code == 201, again.json()
    fields = ("gpu_memory_gib", "gpu_cores_percent", "gpus_per_replica", "cpu_per_replica",
              "memory_gib_per_replica")  # fmt: skip
    assert {f: again.json()[f] for f in fields} == {f: first[f] for f in fields}
