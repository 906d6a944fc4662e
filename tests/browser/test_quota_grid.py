"""The quota grid as it is read, in Chromium: its pinned team column stays inside the grid
(the action bar and the page below paint over it, on a phone and a desktop), and the model a
viewer's teams hold, use or wait for comes first, not last."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from clusters.models import Cluster, Node
from portal.models import Membership, Role
from scheduling.models import GpuModel, Quota
from tests.browser.conftest import PageRecorder, log_in
from tests.factories import TeamFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MODELS = ["t4", "v100-32gb", "l40s", "a100-80gb", "h100-sxm"]


@pytest.fixture
def crowded_grid(catalog, vision, language):
    """Ten teams with quota on five models, each model's quotas within the pool's 16 GPUs of
    it: taller than a phone's screen, wider than it."""
    models = {m.key: m for m in GpuModel.objects.filter(key__in=MODELS)}
    cluster = Cluster.objects.create(name="east", api_url="https://east.k8s.test")
    for key, model in models.items():
        Node.objects.create(
            cluster=cluster,
            name=f"{key}-0",
            gpu_model=model,
            gpu_allocatable=16,
            last_seen_at=timezone.now(),
        )
    teams = [vision, language] + [
        TeamFactory(name=f"Team {i:02d}", slug=f"team-{i:02d}") for i in range(8)
    ]
    for team in teams:
        for key in MODELS:
            Quota.objects.create(team=team, gpu_model=models[key], nominal=1)
    return teams


def _what_is_painted_over_the_pin_in_the_action_bar(p: Any) -> str:
    """The element drawn where the pinned column crosses the sticky action bar."""
    return p.evaluate(
        """() => {
          const bar = document.querySelector('#quota-form .quota-actions').getBoundingClientRect();
          const pin = document.querySelector('tbody th.pin').getBoundingClientRect();
          const el = document.elementFromPoint(pin.left + pin.width / 2, bar.top + bar.height / 2);
          return el.closest('.quota-actions') ? 'action bar'
            : el.closest('.pin') ? 'pinned cell' : el.tagName;
        }"""
    )


@pytest.mark.parametrize(
    "screen",
    [
        {"viewport": {"width": 390, "height": 844}, "is_mobile": True},
        {"viewport": {"width": 1400, "height": 600}},
    ],
    ids=["phone", "desktop"],
)
def test_the_pinned_team_column_never_paints_over_what_is_below_it(
    browser, live_server, root, crowded_grid, screen
):
    context = browser.new_context(**screen)
    recorder = PageRecorder(context.new_page())
    p = recorder.page
    log_in(p, live_server, "root", next_url="/quotas/")
    # the action bar sticks to the bottom of the screen over the grid's rows
    bar = p.locator("#quota-form .quota-actions").bounding_box()
    viewport = screen["viewport"]
    assert bar["y"] + bar["height"] <= viewport["height"] + 1, bar
    grid = p.locator(".quota-grid").bounding_box()
    assert grid["y"] + grid["height"] > bar["y"]  # the grid goes on under the bar
    assert _what_is_painted_over_the_pin_in_the_action_bar(p) == "action bar"
    # scrolled sideways and down a little: still under the bar
    p.locator(".scroll").evaluate("box => { box.scrollLeft = box.scrollWidth; }")
    p.mouse.wheel(0, 120)
    p.wait_for_timeout(100)
    assert _what_is_painted_over_the_pin_in_the_action_bar(p) == "action bar"
    assert recorder.console_errors == []
    context.close()


def test_the_model_the_viewers_teams_hold_comes_first(
    page, live_server, bob, vision, language, catalog
):
    # bob is in Vision and Language; Vision holds 16 H100s (the dearest model, last in the
    # catalog's order), Language 2 T4s (the cheapest, first in it)
    Membership.objects.create(user=bob, team=language, role=Role.MEMBER)
    models = {m.key: m for m in GpuModel.objects.filter(key__in=MODELS)}
    Quota.objects.create(team=vision, gpu_model=models["h100-sxm"], nominal=16)
    Quota.objects.create(team=language, gpu_model=models["t4"], nominal=2)
    # another team's big quota is not bob's business: it does not lead his grid
    other = TeamFactory(name="Robotics", slug="robotics")
    Quota.objects.create(team=other, gpu_model=models["a100-80gb"], nominal=64)
    p = page.page
    log_in(p, live_server, "bob", next_url="/quotas/")
    heads = p.locator(".quota-grid thead th").all_inner_texts()
    assert heads[:3] == ["Team", "h100-sxm", "t4"], heads
