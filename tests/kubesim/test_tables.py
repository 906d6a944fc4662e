"""What ``kubectl get`` prints: server-side tables, and ages measured on the wall clock."""

from __future__ import annotations

import json
import time

from tests.kubesim.builders import create_job, vcjob
from tests.kubesim.conftest import raw


def test_metadata_times_follow_the_wall_clock_while_status_follows_the_simulated_one(
    sim, core, custom
):
    sim.advance(3600)  # the simulated clock is now an hour ahead of the wall clock
    create_job(custom, vcjob("late", namespace="team-b", queue="team-b"))
    sim.settle()
    sim.advance(5)
    pod = core.list_namespaced_pod("team-b").items[0]
    created = pod.metadata.creation_timestamp.timestamp()
    assert abs(time.time() - created) < 5  # AGE is never "<invalid>"
    assert pod.status.start_time.timestamp() > time.time() + 3000  # runtime is simulated
    event = core.list_namespaced_event("team-b").items[0]
    assert abs(time.time() - event.last_timestamp.timestamp()) < 5


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def get_table(sim, path: str) -> dict:
    status, headers, body = raw(sim, "GET", path, headers={"Accept": TABLE})
    assert status == 200, body
    assert headers["content-type"].startswith("application/json;as=Table")
    assert body["kind"] == "Table" and body["apiVersion"] == "meta.k8s.io/v1"
    return body


def columns(table: dict, wide: bool = False) -> list[str]:
    return [c["name"] for c in table["columnDefinitions"] if wide or c["priority"] == 0]


def cells(table: dict, name: str) -> dict:
    names = [c["name"] for c in table["columnDefinitions"]]
    for row in table["rows"]:
        if row["object"]["metadata"]["name"] == name:
            return dict(zip(names, row["cells"], strict=True))
    raise AssertionError(f"no row {name}")


def test_pods_table_has_kubectls_columns_and_wide_ones(sim, core, custom):
    create_job(custom, vcjob("train", namespace="team-b", queue="team-b"))
    sim.settle()
    sim.advance(3)
    table = get_table(sim, "/api/v1/namespaces/team-b/pods")
    assert columns(table) == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert columns(table, wide=True)[5:] == ["IP", "Node", "Nominated Node", "Readiness Gates"]
    row = cells(table, "train-worker-0")
    assert row["Ready"] == "1/1" and row["Status"] == "Running" and row["Restarts"] == 0
    assert row["Node"] == "a100-0" and row["IP"].startswith("10.")
    assert row["Age"].endswith("s")
    sim.advance(120)
    row = cells(get_table(sim, "/api/v1/namespaces/team-b/pods"), "train-worker-0")
    assert row["Status"] == "Completed" and row["Ready"] == "0/1"


def test_pending_pod_shows_pending_and_no_node(sim, custom):
    create_job(
        custom,
        vcjob("nowhere", namespace="team-b", queue="team-b", node_selector={"gpu-type": "h100"}),
    )
    sim.settle()
    row = cells(get_table(sim, "/api/v1/namespaces/team-b/pods"), "nowhere-worker-0")
    assert (row["Status"], row["Node"], row["IP"]) == ("Pending", "<none>", "<none>")


def test_nodes_table(sim):
    table = get_table(sim, "/api/v1/nodes")
    assert columns(table) == ["Name", "Status", "Roles", "Age", "Version"]
    assert "Internal-IP" in columns(table, wide=True)
    row = cells(table, "a100-0")
    assert (row["Status"], row["Roles"], row["Version"]) == ("Ready", "<none>", "v1.31.0-kubesim")


def test_volcano_job_table_uses_the_crds_printer_columns(sim, custom):
    create_job(custom, vcjob("train", namespace="team-b", queue="team-b"))
    sim.settle()
    sim.advance(3)
    table = get_table(sim, "/apis/batch.volcano.sh/v1alpha1/namespaces/team-b/jobs")
    assert columns(table) == ["Name", "STATUS", "minAvailable", "RUNNINGS", "AGE"]
    assert columns(table, wide=True)[-1] == "QUEUE"
    row = cells(table, "train")
    assert (row["STATUS"], row["RUNNINGS"], row["QUEUE"]) == ("Running", 1, "team-b")


def test_events_configmaps_and_namespaces_tables(sim, custom):
    create_job(
        custom,
        vcjob("nowhere", namespace="team-b", queue="team-b", node_selector={"gpu-type": "h100"}),
    )
    sim.settle()
    events = get_table(sim, "/api/v1/namespaces/team-b/events")
    assert columns(events) == ["Last Seen", "Type", "Reason", "Object", "Message"]
    objects = {(r["cells"][2], r["cells"][3]) for r in events["rows"]}
    assert ("FailedScheduling", "pod/nowhere-worker-0") in objects
    cms = get_table(sim, "/api/v1/namespaces/volcano-system/configmaps")
    assert columns(cms) == ["Name", "Data", "Age"]
    assert cells(cms, "volcano-scheduler-configmap")["Data"] == 1
    assert columns(get_table(sim, "/api/v1/namespaces")) == ["Name", "Status", "Age"]


def test_one_object_and_include_object(sim):
    table = get_table(sim, "/api/v1/nodes/a100-0?includeObject=Object")
    assert len(table["rows"]) == 1
    assert table["rows"][0]["object"]["kind"] == "Node"
    table = get_table(sim, "/api/v1/nodes?includeObject=None")
    assert "object" not in table["rows"][0]


def test_watch_sends_one_row_tables(api):
    token = api.configuration.auth_settings()["BearerToken"]["value"]
    response = api.call_api(
        "GET",
        f"{api.configuration.host}/api/v1/nodes?watch=true&timeoutSeconds=1",
        header_params={"Accept": TABLE, "Authorization": token},
    )
    lines = [json.loads(line) for line in response.read().splitlines() if line]
    assert lines[0]["type"] == "ADDED" and lines[0]["object"]["kind"] == "Table"
    assert len(lines[0]["object"]["rows"]) == 1
    assert columns(lines[0]["object"])[0] == "Name"
