"""``gpupool models`` against a live portal (HTTP to pytest-django's ``live_server``): platform
admins offer a card as a shared pool over the REST API the portal's page uses; a team admin
and a member are refused (403, exit 4) and nothing is created (issue 32)."""

from __future__ import annotations

import json

import pytest

from scheduling.models import GpuModel, QuotaChange

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_platform_admin_offers_a_card_as_a_shared_pool(cli, catalog, root):
    result = cli(root, "models", "share", "a100-80gb")
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("a100-80gb-shared  shares a100-80gb  offered; unit GiB, up to 80 GiB")
    assert "give teams GiB on the quota grid" in result.output
    pool = GpuModel.objects.get(key="a100-80gb-shared")
    assert pool.shares.key == "a100-80gb" and pool.resource_name == "volcano.sh/vgpu-memory"
    assert QuotaChange.objects.filter(field="shared_pool", changed_by=root).count() == 1
    again = cli(root, "models", "share", "a100-80gb", "--json")
    assert again.exit_code == 0, again.output
    body = json.loads(again.output)
    assert (body["key"], body["created"], body["unit"]) == ("a100-80gb-shared", False, "GiB")
    listed = cli(root, "models", "ls")
    assert "a100-80gb-shared" in listed.output


def test_team_admins_and_members_are_refused(cli, catalog, alice, bob):
    for user in (alice, bob):
        result = cli(user, "models", "share", "t4")
        assert result.exit_code == 4, result.output
        assert "403" in result.output
    assert not GpuModel.objects.filter(shares__key="t4").exists()


def test_bad_input_names_the_field(cli, catalog, root):
    slice_ = cli(root, "models", "share", "a100-80gb-mig-1g.10gb")
    assert slice_.exit_code == 2, slice_.output
    assert "MIG slice" in slice_.output
    cost = cli(root, "models", "share", "t4", "--cost-factor", "0")
    assert cost.exit_code == 2 and "cost_factor" in cost.output
    missing = cli(root, "models", "share", "no-such-card")
    assert missing.exit_code == 3, missing.output
    assert not GpuModel.objects.filter(shares__isnull=False).exists()


def test_the_api_answers_403_to_others_and_201_then_200_to_platform_admins(
    api_as, catalog, alice, root
):
    url = "/api/v1/gpu-models/t4/shared-pool/"
    refused = api_as(alice).post(url, {}, format="json")
    assert refused.status_code == 403
    created = api_as(root).post(url, {"cost_factor": 0.01}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["cost_factor"] == 0.01
    assert api_as(root).post(url, {}, format="json").status_code == 200
    bad = api_as(root).post("/api/v1/gpu-models/t4-shared/shared-pool/", {}, format="json")
    assert bad.status_code == 400
    assert "card" in bad.json()["extra"]["fields"]


def test_show_gives_a_shares_total_in_gib(cli, catalog, vision, bob):
    from portal.models import JobState
    from tests.factories import JobFactory

    job = JobFactory(
        team=vision,
        owner=bob,
        state=JobState.QUEUED,
        replicas=2,
        gpus_per_replica=20,
        gpu_memory_gib=20,
    )
    result = cli(bob, "show", str(job.public_id))
    assert result.exit_code == 0, result.output
    assert "2x20GiB (40 GiB in all)" in result.output
