"""A team's usage page adds one line per user: GPU-hours over every model, weighted, their
share of the team and the cost, most first. Another team's usage stays a 404."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from scheduling.models import GpuModel, UsageRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def used(alice, bob, vision, catalog):
    a100 = GpuModel.objects.get(key="a100-80gb")
    t4 = GpuModel.objects.get(key="t4")
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(days=1)
    for user, model, hours, weighted in [
        (bob, a100, 8, 8),
        (bob, t4, 2, 0.54),
        (alice, a100, 4, 4),
    ]:
        UsageRecord.objects.create(
            team=vision, user=user, gpu_model=model, hour=hour, gpu_hours=hours,
            weighted_gpu_hours=weighted,
        )  # fmt: skip


def test_the_team_usage_page_totals_each_user(client, alice, used):
    client.force_login(alice)
    page = client.get("/usage/?scope=vision").content.decode()
    table = page.split('id="usage-user-totals"', 1)[1].split("</table>", 1)[0]
    assert table.index('data-user="bob"') < table.index('data-user="alice"')
    bob_row = table.split('data-user="bob"', 1)[1].split("</tr>", 1)[0]
    assert "<td>10.0 h</td>" in bob_row and "<td>8.54 h</td>" in bob_row and "68 %" in bob_row


def test_another_team_cannot_read_it(client, charlie, used):
    client.force_login(charlie)
    assert client.get("/usage/?scope=vision").status_code == 404
