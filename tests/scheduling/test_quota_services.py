"""Quota and policy changes: validated, audited, visible to the next cycle."""

from __future__ import annotations

import pytest

from portal.errors import ApplicationError
from scheduling.models import GpuModel, QuotaChange
from scheduling.services import quota_grid, quota_set, team_policy_set

pytestmark = pytest.mark.django_db


def test_a_quota_change_is_audited_field_by_field(root, vision, catalog):
    a100 = GpuModel.objects.get(key="a100-80gb")
    quota_set(team=vision, model=a100, nominal=8, borrowing_limit=4, by=root)
    quota_set(team=vision, model=a100, nominal=16, borrowing_limit=4, by=root)
    changes = list(
        QuotaChange.objects.order_by("id").values_list("field", "old_value", "new_value")
    )
    assert changes == [("nominal", "", "8"), ("borrowing_limit", "", "4"), ("nominal", "8", "16")]
    assert QuotaChange.objects.filter(changed_by=root).count() == 3


@pytest.mark.parametrize("value", [-1, "-3", "lots"])
def test_negative_or_malformed_quota_is_refused(root, vision, catalog, value):
    with pytest.raises(ApplicationError) as exc:
        quota_set(team=vision, model=GpuModel.objects.get(key="t4"), nominal=value, by=root)
    assert "nominal" in exc.value.fields


def test_the_grid_warns_when_nominal_exceeds_capacity(root, vision, language, pool):
    pool("east", "t4", nodes=1, gpus=4)
    t4 = GpuModel.objects.get(key="t4")
    quota_set(team=vision, model=t4, nominal=3, by=root)
    assert t4 not in quota_grid().overcommitted()
    quota_set(team=language, model=t4, nominal=2, by=root)
    assert t4 in quota_grid().overcommitted()


def test_policy_changes_are_audited(root, vision):
    team_policy_set(team=vision, by=root, weight=2.0, held=True)
    fields = set(QuotaChange.objects.values_list("field", flat=True))
    assert fields == {"weight", "held"}
    with pytest.raises(ApplicationError):
        team_policy_set(team=vision, by=root, weight=0)
