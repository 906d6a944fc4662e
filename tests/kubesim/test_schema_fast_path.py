"""kubesim's fast schema check must give jsonschema's verdict on every body.

The fast check (``CRD.accepts``, jsonschema-rs) decides whether ``jsonschema`` is asked for the
errors at all: were it ever to accept a body that Draft 7 rejects, kubesim would store an
invalid Volcano Job that a real API server answers with 422. So it is checked on the portal's
own manifests and on those manifests with one value anywhere replaced by a value of another
shape.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubesim.schema import load_crds
from rules.volcano import build_volcano_job
from tests.clusters.test_volcano_manifest import a_spec, job_specs

JOBS = load_crds()["jobs"]

ODD_VALUES = st.sampled_from(
    [None, True, -1, 0, 1.5, "", "x", "-3", [], ["a"], [1], {}, {"a": 1}, {"name": None}]
)


def body_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in manifest.items() if k != "metadata"}


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in ``node`` a value sits at (object keys and list indexes)."""
    out: list[tuple[Any, ...]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        out.append((*prefix, key))
        if isinstance(value, dict | list) and value:
            out.extend(paths(value, (*prefix, key)))
    return out


def set_at(node: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def jsonschema_accepts(body: dict[str, Any]) -> bool:
    return not any(True for _ in JOBS.validator.iter_errors(body))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job_specs())
def test_the_fast_check_accepts_every_manifest_the_portal_builds(spec):
    body = body_of(build_volcano_job(spec))
    assert jsonschema_accepts(body)
    assert JOBS.accepts(body)
    assert JOBS.validate({"metadata": {"name": "j"}, **body}) == []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job_specs(), st.data())
def test_a_body_with_one_odd_value_gets_the_same_verdict_from_both(spec, data):
    body = copy.deepcopy(body_of(build_volcano_job(spec)))
    where = data.draw(st.sampled_from(paths(body)), label="path")
    set_at(body, where, data.draw(ODD_VALUES, label="value"))
    assert JOBS.accepts(body) == jsonschema_accepts(body), where


def test_a_rejected_body_is_worded_by_jsonschema_naming_the_field():
    body = copy.deepcopy(body_of(build_volcano_job(a_spec())))
    body["spec"]["minAvailable"] = "two"
    assert not JOBS.accepts(body)
    causes = JOBS.validate({"metadata": {"name": "j"}, **body})
    assert [c["field"] for c in causes] == ["spec.minAvailable"]


def test_a_body_that_is_not_json_gets_causes_not_a_crash():
    """YAML bodies can carry dates; jsonschema-rs refuses such values outright."""
    import datetime as dt

    body = copy.deepcopy(body_of(build_volcano_job(a_spec())))
    body["spec"]["queue"] = dt.date(2024, 1, 1)
    assert not JOBS.accepts(body)
    causes = JOBS.validate({"metadata": {"name": "j"}, **body})
    assert [c["field"] for c in causes] == ["spec.queue"]
