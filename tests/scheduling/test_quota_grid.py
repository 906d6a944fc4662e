"""The quota grid as a platform admin uses it: models that matter first, several cells staged
and saved in one audited batch (all or nothing), totals checked against capacity as they type,
and an audit list worded for people."""

from __future__ import annotations

import pytest

from portal.models import JobState
from scheduling.models import GpuModel, Quota, QuotaChange
from tests.builders import a_cluster, gpu_node
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def _cell(team: str, model: str, nominal: str, borrowing: str, was=("0", "")) -> dict[str, str]:
    name = f"{team}:{model}"
    return {
        f"n:{name}": nominal,
        f"b:{name}": borrowing,
        f"was-n:{name}": was[0],
        f"was-b:{name}": was[1],
    }


@pytest.fixture
def a100_hardware(catalog):
    gpu_node(a_cluster("east"), "a100-0", "a100-80gb", 8)
    return GpuModel.objects.get(key="a100-80gb")


def test_models_with_hardware_or_quota_come_first_and_the_rest_behind_show_all(
    client, root, vision, a100_hardware, quota
):
    quota(vision, "t4", nominal=2)
    client.force_login(root)
    page = client.get("/quotas/").content.decode()
    assert 'name="n:vision:a100-80gb"' in page and 'name="n:vision:t4"' in page
    assert 'name="n:vision:v100-32gb"' not in page
    assert "Show all" in page
    every = client.get("/quotas/?models=all").content.decode()
    assert 'name="n:vision:v100-32gb"' in every
    assert every.index("a100-80gb") < every.index("v100-32gb")


def test_several_cells_save_in_one_batch_each_change_audited_in_words(
    client, root, vision, language, a100_hardware, quota
):
    quota(vision, "a100-80gb", nominal=2)
    client.force_login(root)
    body = {
        **_cell("vision", "a100-80gb", "4", "8", was=("2", "")),
        **_cell("language", "a100-80gb", "3", "", was=("0", "")),
        **_cell("language", "t4", "0", "", was=("0", "")),  # untouched: not saved, not audited
    }
    response = client.post("/quotas/", body)
    assert response.status_code == 302
    assert Quota.objects.get(team=vision, gpu_model=a100_hardware).borrowing_limit == 8
    assert Quota.objects.get(team=language, gpu_model=a100_hardware).nominal == 3
    assert not Quota.objects.filter(team=language, gpu_model__key="t4").exists()
    changes = list(QuotaChange.objects.order_by("id"))
    assert sorted((c.team.slug, c.field) for c in changes) == [
        ("language", "nominal"),
        ("vision", "borrowing_limit"),
        ("vision", "nominal"),
    ]
    assert len({c.changed_at for c in changes}) == 1  # one batch
    page = client.get("/quotas/").content.decode()
    assert "vision / a100-80gb borrowing limit: none → 8" in page
    assert "vision / a100-80gb nominal quota: 2 → 4" in page


def test_one_bad_cell_saves_nothing_and_keeps_every_typed_value(
    client, root, vision, language, a100_hardware
):
    client.force_login(root)
    body = {
        **_cell("vision", "a100-80gb", "4", ""),
        **_cell("language", "a100-80gb", "lots", ""),
    }
    response = client.post("/quotas/", body)
    text = response.content.decode()
    assert response.status_code == 400
    assert "language/a100-80gb nominal" in text and "whole number" in text
    assert 'name="n:vision:a100-80gb" value="4"' in text
    assert 'name="n:language:a100-80gb" value="lots"' in text
    assert not Quota.objects.exists() and not QuotaChange.objects.exists()


def test_a_cell_changed_by_someone_else_meanwhile_is_not_overwritten(
    client, root, vision, a100_hardware, quota
):
    quota(vision, "a100-80gb", nominal=5)  # the page was loaded when it was 2
    client.force_login(root)
    response = client.post("/quotas/", _cell("vision", "a100-80gb", "4", "", was=("2", "")))
    assert response.status_code == 400
    assert "Changed by someone else since this page loaded (now 5)" in response.content.decode()
    assert Quota.objects.get().nominal == 5 and not QuotaChange.objects.exists()


def test_the_check_as_the_admin_types_shows_the_overcommit_and_saves_nothing(
    client, root, vision, language, a100_hardware, quota
):
    quota(language, "a100-80gb", nominal=6)
    JobFactory(team=vision, state=JobState.RUNNING, gpu_model=a100_hardware, gpus_per_replica=1)
    client.force_login(root)
    response = client.post(
        "/quotas/check/",
        {
            **_cell("vision", "a100-80gb", "5", "", was=("0", "")),
            **_cell("language", "a100-80gb", "6", "", was=("6", "")),
        },
        HTTP_HX_REQUEST="true",
    )
    text = response.content.decode()
    assert response.status_code == 200
    assert "1 cell changed, not saved yet" in text
    assert "vision / a100-80gb: nominal quota 0 → 5" in text
    assert 'id="total-a100-80gb"' in text and 'hx-swap-oob="true"' in text
    assert "11 of 8 GPUs" in text and "overcommitted by 3" in text
    assert Quota.objects.get().nominal == 6 and not QuotaChange.objects.exists()
