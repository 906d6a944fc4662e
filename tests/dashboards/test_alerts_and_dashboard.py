"""deploy/prometheus/ and deploy/grafana/ ask only for what /metrics really exports.

Every PromQL expression of the alert rules and of the Grafana dashboard is parsed
(promql-parser, the Rust PromQL parser), and every metric and label it names is checked
against a real scrape of /metrics over the dashboards' kubesim scenario (with the worker-side
histograms observed), or against the few dcgm-exporter series the dashboard shows beside them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from dashboards import dcgm
from dashboards.metrics import metrics_exposition
from dashboards.models import MetricsSource
from portal.telemetry import observe_cycle, observe_dispatch

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "gpupool-alerts.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "gpupool.json"
# dcgm-exporter's series the dashboard shows next to the portal's (the names dashboards.dcgm
# reads), with the labels dcgm-exporter puts on them.
DCGM = {
    name: {"gpu", "UUID", "device", "modelName", "Hostname", "pod", "namespace", "container"}
    for name in (dcgm.GPU_UTIL, dcgm.FB_USED, dcgm.FB_FREE, dcgm.ENGINE_ACTIVE)
}
# Grafana fills these in before Prometheus sees the query.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m"}
ISSUE_ALERTS = {
    "GpupoolSchedulerStopped", "GpupoolDispatchFailing", "GpupoolClusterUnreachable",
    "GpupoolSnapshotsStale", "GpupoolJobsStuck", "GpupoolIdleAllocations",
}  # fmt: skip


@pytest.fixture
def exported(scenario) -> dict[str, set[str]]:
    """Each series name a scrape holds, with the labels it carries (histograms observed as the
    workers do; ``le`` on buckets)."""
    observe_cycle(seconds=0.02)
    observe_dispatch(cluster=scenario.name, admitted_at=timezone.now())
    # The cluster's Prometheus was read once (dashboards.collect_gpu_metrics does this).
    MetricsSource.objects.create(cluster=scenario, checked_at=timezone.now(), ok=True)
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics_exposition().decode()):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _dashboard_queries() -> Iterator[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    for panel in dash["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"]


def _selectors(expr: str) -> Iterator[tuple[str, set[str], set[str]]]:
    """(metric, labels matched, labels grouped by) for every selector of ``expr``."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    tree = promql_parser.parse(expr)
    found: dict[tuple[str, frozenset[str]], None] = {}  # a range's selector is visited twice
    grouping: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            grouping.extend(node.modifier.labels)
        if isinstance(node, promql_parser.MatrixSelector):
            node = node.vector_selector
        if isinstance(node, promql_parser.VectorSelector):
            found[(node.name, frozenset(m.name for m in node.matchers.matchers))] = None

    promql_parser.walk(tree, visit)
    # Grouping labels must exist on some selector of the expression (le: histogram buckets).
    for metric, matched in found:
        yield metric, set(matched), set(grouping)


def _check(where: str, expr: str, exported: dict[str, set[str]]) -> list[str]:
    known = {**exported, **DCGM}
    problems = []
    selectors = list(_selectors(expr))
    assert selectors, f"{where}: no metric in {expr!r}"
    for metric, matched, _ in selectors:
        if metric not in known:
            problems.append(f"{where}: {metric} is not exported")
            continue
        if matched - known[metric]:
            problems.append(f"{where}: {metric} has no label {sorted(matched - known[metric])}")
    grouped = selectors[0][2]
    available = set().union(*(known.get(m, set()) for m, _, _ in selectors))
    if grouped - available:
        problems.append(f"{where}: grouped by {sorted(grouped - available)}, which no series has")
    return problems


def test_every_alert_expression_names_exported_metrics_and_labels(exported):
    problems = [p for rule in _rules() for p in _check(rule["alert"], rule["expr"], exported)]
    assert problems == []


def test_every_dashboard_query_names_exported_metrics_and_labels(exported):
    queries = list(_dashboard_queries())
    assert len(queries) >= 12
    problems = [p for title, expr in queries for p in _check(title, expr, exported)]
    assert problems == []


def test_the_check_catches_a_misspelt_metric_or_label(exported):
    assert _check("x", "sum(rate(gpupool_scheduler_cycles_count[5m]))", exported) == [
        "x: gpupool_scheduler_cycles_count is not exported"
    ]
    assert _check("x", 'gpupool_jobs{status="QUEUED"}', exported) == [
        "x: gpupool_jobs has no label ['status']"
    ]
    assert _check("x", "sum by (team) (gpupool_queue_jobs)", exported) == [
        "x: grouped by ['team'], which no series has"
    ]
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(gpupool_jobs[5m])")


def test_the_rules_cover_the_issues_alerts_and_each_has_a_runbook(exported):
    rules = {rule["alert"]: rule for rule in _rules()}
    assert set(rules) == ISSUE_ALERTS
    operations = (ROOT / "docs" / "operations.md").read_text()
    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", operations, re.M)
    }
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        anchor = rule["annotations"]["runbook"].removeprefix("docs/operations.md#")
        assert anchor in headings, f"{name}: no section #{anchor} in docs/operations.md"
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name


def test_the_stuck_job_alert_sees_the_scenarios_hour_old_admission(exported, scenario):
    """The scenario admitted a job an hour ago that never reached the cluster: the series the
    alert reads says so (above its 30-minute threshold)."""
    values = {
        s.labels["state"]: s.value
        for family in text_string_to_metric_families(metrics_exposition().decode())
        if family.name == "gpupool_jobs_oldest_seconds"
        for s in family.samples
    }
    assert values["ADMITTED"] > 1800
    assert values["QUEUED"] > 1800
    assert "SUBMITTED" not in values
    (rule,) = [r for r in _rules() if r["alert"] == "GpupoolJobsStuck"]
    assert re.search(r"> (\d+)", rule["expr"]).group(1) == "1800"
