"""What platform admins do in the portal's own pages: the quota grid (staged edits checked as
they type, saved in one batch) and the clusters (register, test, enable, drain, delete)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.utils import timezone

from clusters.models import Cluster, Node
from scheduling.models import GpuModel, Quota, QuotaChange
from tests.browser.conftest import log_in, wait_until
from tests.clusters.conftest import (  # noqa: F401  (fixtures)
    _cluster_settings,
    _fresh_clients,
    kubeconfig_text,
    sim,
    sim_config,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pool_with_a100s(catalog, vision, language):
    cluster = Cluster.objects.create(name="east", api_url="https://east.k8s.test")
    model = GpuModel.objects.get(key="a100-80gb")
    for i in range(2):
        Node.objects.create(
            cluster=cluster,
            name=f"a100-{i}",
            gpu_model=model,
            gpu_allocatable=8,
            last_seen_at=timezone.now(),
        )
    Quota.objects.create(team=vision, gpu_model=model, nominal=8)
    return cluster


def test_the_quota_grid_stages_edits_warns_as_the_admin_types_and_saves_one_batch(
    page, live_server, root, pool_with_a100s, tmp_path
):
    shots = Path(os.environ.get("GPUPOOL_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    p = page.page
    p.set_viewport_size({"width": 700, "height": 900})  # narrow enough for the grid to scroll
    log_in(p, live_server, "root", next_url="/quotas/")
    # models without hardware or quota wait behind "show all"
    assert p.locator('input[name="n:vision:a100-80gb"]').count() == 1
    assert p.locator('input[name="n:vision:v100-32gb"]').count() == 0
    assert p.get_by_role("link", name="Show all").is_visible()
    # the team column stays pinned while the grid scrolls sideways
    team = p.locator("tbody th.pin").first
    assert team.evaluate("th => getComputedStyle(th).position") == "sticky"
    x_before = team.bounding_box()["x"]
    p.locator(".scroll").evaluate("box => { box.scrollLeft = box.scrollWidth; }")
    assert abs(team.bounding_box()["x"] - x_before) < 1
    p.set_viewport_size({"width": 1400, "height": 900})
    # two cells typed: both staged, the column total checked against 16 GPUs as they type
    p.fill('input[name="n:language:a100-80gb"]', "12")
    p.fill('input[name="b:vision:a100-80gb"]', "8")
    wait_until(p, "document.querySelector('#quota-staged').innerText.includes('2 cells changed')")
    total = p.locator("#total-a100-80gb")
    assert "20 of 16 GPUs" in total.inner_text() and "overcommitted by 4" in total.inner_text()
    assert p.locator("input.staged").count() == 2
    assert "borrowing limit none → 8" in p.inner_text("#quota-staged")
    assert not QuotaChange.objects.exists()  # nothing saved while typing
    p.screenshot(path=str(shots / "quotas-admin.png"), full_page=True)
    p.get_by_role("button", name="Save all changes").click()
    p.wait_for_url(f"{live_server.url}/quotas/")
    assert "Saved 2 quota cells." in p.inner_text(".messages")
    audit = p.inner_text(".audit")
    assert "vision / a100-80gb borrowing limit: none → 8" in audit
    assert "language / a100-80gb nominal quota: 0 → 12" in audit
    assert QuotaChange.objects.count() == 2
    assert page.console_errors == []


def test_an_admin_registers_tests_enables_drains_and_deletes_a_cluster_in_the_portal(
    page,
    live_server,
    root,
    catalog,
    sim,  # noqa: F811  (the kubesim fixture)
    tmp_path,
):
    kubeconfig = tmp_path / "east.kubeconfig"
    kubeconfig.write_text(kubeconfig_text(sim))
    p = page.page
    log_in(p, live_server, "root", next_url="/")
    # from the nav to the heat map, then to the cluster list and its register page
    p.locator("#main-nav").get_by_role("link", name="Clusters").click()
    p.get_by_role("link", name="Register a cluster…").click()
    p.wait_for_url(f"{live_server.url}/clusters/register/")
    # a failed save: every typed field comes back, the file must be chosen again, said so
    p.fill("#id_name", "Not A Label")
    p.set_input_files("#id_kubeconfig_file", str(kubeconfig))
    p.fill("#id_namespace", "research")
    p.fill("#id_token", "typed-token")
    p.get_by_role("button", name="Register").click()
    summary = p.locator("#error-summary")
    assert "Name:" in summary.inner_text()
    assert "Choose the kubeconfig file again" in summary.inner_text()
    assert p.input_value("#id_namespace") == "research"
    assert p.input_value("#id_token") == "typed-token"
    assert p.input_value("#id_name") == "Not A Label"
    # fixed: registered disabled, tested, enabled
    p.fill("#id_name", "east")
    p.fill("#id_namespace", "")  # the kubeconfig's own (kubesim has no "research")
    p.fill("#id_token", "")
    p.set_input_files("#id_kubeconfig_file", str(kubeconfig))
    p.get_by_role("button", name="Register").click()
    p.wait_for_url(f"{live_server.url}/clusters/east/test/")
    p.get_by_role("button", name="Test connection now").click()
    assert "OK" in p.locator("section[role=status] h2").inner_text(), p.inner_text("main")
    p.get_by_role("link", name="Enable east…").click()
    p.get_by_role("button", name="Enable east").click()
    p.wait_for_url(f"{live_server.url}/clusters/east/")
    assert "east is now enabled." in p.inner_text(".messages")
    # drain: the numbers first, then the change
    p.get_by_role("link", name="Drain…").click()
    assert "0 running, 0 queued affected." in p.inner_text("#impact")
    p.get_by_role("button", name="Drain east").click()
    assert Cluster.objects.get(name="east").state == "draining"
    # an unreachable cluster shows its error on the heat map, and the map links to it
    Cluster.objects.filter(name="east").update(
        unreachable_since=timezone.now(), unreachable_error="connection refused by 127.0.0.1"
    )
    p.goto(f"{live_server.url}/pool/clusters/")
    assert "connection refused by 127.0.0.1" in p.inner_text("#cluster-east .cluster-error")
    p.locator("#cluster-east h2").get_by_role("link", name="east").click()
    p.wait_for_url(f"{live_server.url}/clusters/east/")
    p.get_by_role("link", name="Delete…").click()
    p.get_by_role("button", name="Delete east").click()
    p.wait_for_url(f"{live_server.url}/clusters/")
    assert not Cluster.objects.filter(name="east").exists()
    # the failed save answered 400 on purpose (Chromium logs that); nothing else went wrong
    assert [e for e in page.console_errors if "status of 400" not in e] == []
