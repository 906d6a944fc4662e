"""Platform admins edit the catalog and team policies in the portal (issue 32): what a change
affects is counted from the real jobs, nodes and quotas before it is saved, the save is audited,
and nobody else may (403)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from clusters.models import Cluster, Node
from portal.models import JobState, Priority
from scheduling.admin_edits import gpu_model_impact, shared_pool_offer, team_policy_impact
from scheduling.models import GpuModel, Quota, QuotaChange, TeamPolicy
from tests.factories import JobFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def t4(catalog):
    return GpuModel.objects.get(key="t4")


def _queue(team, owner, n, **fields):
    return [JobFactory(team=team, owner=owner, state=JobState.QUEUED, **fields) for _ in range(n)]


def test_disabling_a_model_names_the_queued_jobs_that_can_no_longer_run_on_it(
    t4, vision, language, bob, charlie
):
    _queue(vision, bob, 3, gpu_models=["t4"])  # only t4: left with nothing
    _queue(language, charlie, 2, gpu_models=["t4", "a100-80gb"])  # t4 first, then a100
    _queue(language, charlie, 4, gpu_models=["a100-80gb"])  # never on t4
    effects = [e.text for e in gpu_model_impact(t4, {"active": False})]
    assert (
        effects[0] == "model disabled: 5 queued jobs can no longer run on it (vision 3, language 2)"
    )
    assert effects[1].startswith("3 queued jobs of these would match no model at all")
    assert effects[2].startswith("2 queued jobs would try another model first")


def test_a_cost_factor_change_says_how_fair_share_weighs_it(t4, vision, bob):
    effects = [e.text for e in gpu_model_impact(t4, {"cost_factor": 0.5})]
    assert any(f"counts 0.5 instead of {t4.cost_factor:g}" in e for e in effects)


def test_a_lower_queue_limit_counts_the_jobs_beyond_it(vision, bob, alice):
    _queue(vision, bob, 5)
    _queue(vision, alice, 3)
    effects = [e.text for e in team_policy_impact(vision, {"max_queued_jobs": 5})[0]]
    assert (
        "3 queued jobs of team vision would exceed the new queue limit (8 queued, limit 5)"
        in effects[0]
    )
    per_member = [e.text for e in team_policy_impact(vision, {"max_queued_jobs_per_user": 4})[0]]
    assert "bob (5 queued, 1 over)" in per_member[0]
    held = [e.text for e in team_policy_impact(vision, {"held": True})[0]]
    assert held[0].startswith("queue held: 8 queued jobs of team vision would not start")


def test_lowering_the_highest_priority_counts_the_jobs_above_it(vision, bob):
    TeamPolicy.objects.create(team=vision, max_priority=Priority.HIGH)
    _queue(vision, bob, 2, priority=Priority.HIGH)
    _queue(vision, bob, 1)
    effects = team_policy_impact(vision, {"max_priority": Priority.NORMAL})[0]
    assert effects[0].text.startswith("2 queued jobs of team vision submitted above normal")


def test_offering_a_card_as_a_shared_pool_is_audited_and_idempotent(catalog, root):
    card = GpuModel.objects.get(key="a100-80gb")
    cluster = Cluster.objects.create(name="east", api_url="https://east.k8s.test")
    Node.objects.create(
        cluster=cluster,
        name="shared-0",
        gpu_product="NVIDIA-A100-SXM4-80GB shared",
        gpu_resource="volcano.sh/vgpu-memory",
        gpu_allocatable=640,
        last_seen_at=timezone.now(),
    )
    labels = card.product_labels
    assert "NVIDIA-A100-SXM4-80GB" in labels, labels
    pool, created = shared_pool_offer(card=card, by=root)
    assert created and pool.key == "a100-80gb-shared" and pool.shares == card
    assert pool.cost_factor == pytest.approx(card.cost_factor / 80)
    again, created = shared_pool_offer(card=card, by=root)
    assert again == pool and not created
    change = QuotaChange.objects.get(field="shared_pool")
    assert change.gpu_model == card and change.new_value == "a100-80gb-shared"


def test_pages_are_for_platform_admins_only(client, catalog, vision, alice, bob):
    for user in (alice, bob):
        client.force_login(user)
        for url in (
            "/catalog/",
            "/catalog/t4/",
            "/catalog/t4/share/",
            "/policies/",
            "/policies/vision/",
        ):
            assert client.get(url).status_code == 403, (user, url)
        assert client.post("/catalog/t4/", {"action": "save"}).status_code == 403
        assert "/catalog/" not in client.get("/quotas/").content.decode()


def test_an_edit_is_reviewed_then_saved_and_a_changed_form_is_reviewed_again(
    client, t4, vision, bob, root
):
    _queue(vision, bob, 2, gpu_models=["t4"])
    client.force_login(root)
    form = {
        "display_name": t4.display_name,
        "cost_factor": str(t4.cost_factor),
        "memory_gib": str(t4.memory_gib),
        "fp16_tflops": str(t4.fp16_tflops),
        "product_labels": ", ".join(t4.product_labels),
        "bf16": "on" if t4.bf16 else "",
        "fp8": "",
        "action": "review",
    }  # "active" left out: unticked
    review = client.post("/catalog/t4/", form)
    page = review.content.decode()
    assert "model disabled: 2 queued jobs can no longer run on it (vision 2)" in page
    assert GpuModel.objects.get(key="t4").active
    reviewed = page.split('name="reviewed" value="')[1].split('"')[0]
    # Saving what was not reviewed (now also a new cost factor) shows the review again.
    stale = client.post(
        "/catalog/t4/", {**form, "cost_factor": "0.2", "action": "save", "reviewed": reviewed}
    )
    assert stale.status_code == 200 and GpuModel.objects.get(key="t4").active
    saved = client.post("/catalog/t4/", {**form, "action": "save", "reviewed": reviewed})
    assert saved.status_code == 302
    assert not GpuModel.objects.get(key="t4").active
    assert QuotaChange.objects.get(gpu_model=t4, field="active").new_value == "False"


def test_a_bad_value_names_the_field_and_saves_nothing(client, t4, root):
    client.force_login(root)
    response = client.post(
        "/catalog/t4/",
        {
            "cost_factor": "cheap",
            "memory_gib": "16",
            "fp16_tflops": "65",
            "display_name": "T4",
            "active": "on",
            "action": "save",
        },
    )
    assert response.status_code == 400
    assert "cost_factor" in response.content.decode()
    assert GpuModel.objects.get(key="t4").cost_factor == t4.cost_factor


def test_a_team_policy_edit_saves_after_review(client, vision, bob, root):
    _queue(vision, bob, 4)
    client.force_login(root)
    form = {
        "weight": "1",
        "cohort": "default",
        "max_priority": "normal",
        "max_queued_jobs": "3",
        "action": "review",
    }
    page = client.post("/policies/vision/", form).content.decode()
    assert "1 queued job of team vision would exceed the new queue limit" in page
    reviewed = page.split('name="reviewed" value="')[1].split('"')[0]
    assert (
        client.post(
            "/policies/vision/", {**form, "action": "save", "reviewed": reviewed}
        ).status_code
        == 302
    )
    assert TeamPolicy.objects.get(team=vision).max_queued_jobs == 3
    assert QuotaChange.objects.filter(team=vision, field="max_queued_jobs").exists()
    assert Quota.objects.count() == 0  # nothing else touched
    assert UserFactory  # personas from the shared factories


def test_amounts_of_a_shared_pool_name_their_unit_on_pages(client, catalog, root, bob):
    from scheduling.templatetags.gpu_units import of_model

    card = GpuModel.objects.get(key="a100-80gb")
    pool, _ = shared_pool_offer(card=card, by=root)
    assert of_model(30, pool.key) == "30 GiB of a100-80gb-shared"
    assert of_model(8, "a100-80gb") == "8 \u00d7 a100-80gb"
    cluster = Cluster.objects.create(name="east", api_url="https://east.k8s.test")
    Node.objects.create(
        cluster=cluster,
        name="shared-0",
        gpu_model=pool,
        gpu_resource="volcano.sh/vgpu-memory",
        gpu_allocatable=640,
        last_seen_at=timezone.now(),
    )
    client.force_login(bob)
    page = client.get("/clusters/").content.decode()
    assert "640 GiB of a100-80gb-shared" in page
    assert "640 \u00d7 a100-80gb-shared" not in page


def test_the_quota_grid_counts_a_shared_pool_in_gib(client, catalog, vision, root):
    from scheduling.services import quota_lowering_warning

    card = GpuModel.objects.get(key="a100-80gb")
    pool, _ = shared_pool_offer(card=card, by=root)
    cluster = Cluster.objects.create(name="east", api_url="https://east.k8s.test")
    Node.objects.create(
        cluster=cluster,
        name="shared-0",
        gpu_model=pool,
        gpu_resource="volcano.sh/vgpu-memory",
        gpu_allocatable=640,
        last_seen_at=timezone.now(),
    )
    Quota.objects.create(team=vision, gpu_model=pool, nominal=160)
    client.force_login(root)
    page = client.get("/quotas/").content.decode()
    assert "a100-80gb-shared <small>(GiB)</small>" in page
    assert "160 of 640 GiB" in page
    assert str(Quota.objects.get(gpu_model=pool)) == "Vision: 160 GiB of a100-80gb-shared"
    warning = quota_lowering_warning(team=vision, model=pool, nominal=40, in_use=100)
    assert warning.startswith("vision uses 100 GiB of a100-80gb-shared now, 60 more than")
    assert "holding those 60 GiB then run on borrowed" in warning


def test_enabling_a_model_counts_the_jobs_that_could_then_run_on_it(t4, vision, bob, root):
    from scheduling.admin_edits import gpu_model_update

    _queue(vision, bob, 2, gpu_models=["t4"])
    gpu_model_update(model=t4, by=root, changes={"active": False})
    effects = [e.text for e in gpu_model_impact(GpuModel.objects.get(key="t4"), {"active": True})]
    assert effects[0] == "model enabled: 2 queued jobs could run on it that cannot now (vision 2)"


def test_a_weight_change_is_reviewed_with_the_next_cycles_preview(client, vision, root):
    client.force_login(root)
    form = {"weight": "3", "cohort": "default", "max_priority": "normal", "action": "review"}
    page = client.post("/policies/vision/", form).content.decode()
    assert "next cycle: 0 job(s) would start (now 0)" in page
    assert "What the next cycle would do" in page
