"""Pure helpers: quantities, selectors, patches and field ownership."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubesim.patch import json_patch, merge_patch, server_side_apply
from kubesim.quantity import QuantityError, format_milli, to_milli
from kubesim.selectors import SelectorError, parse_label_selector, tolerates


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("1", 1000),
        (8, 8000),
        ("500m", 500),
        ("1.5", 1500),
        ("1Ki", 1024000),
        ("16Gi", 16 * 2**30 * 1000),
        ("1e3", 1_000_000),
        ("2k", 2_000_000),
        ("0.1m", 1),
    ],
)
def test_quantities_parse_to_exact_milli_units(text, milli):
    assert to_milli(text) == milli


@pytest.mark.parametrize("text", ["1 GPU", "abc", "1.2.3", ""])
def test_invalid_quantities_raise(text):
    with pytest.raises(QuantityError):
        to_milli(text)


@given(st.integers(min_value=0, max_value=2**40))
def test_formatted_memory_parses_back(value):
    milli = value * 1024 * 1000
    assert to_milli(format_milli(milli, "memory")) == milli


_label = st.text("abc-1", min_size=1, max_size=6).filter(lambda s: s[0] != "-" and s[-1] != "-")


@settings(max_examples=40)
@given(st.dictionaries(_label, _label, max_size=4), _label, _label)
def test_equality_and_inequality_are_complements(labels, key, value):
    eq = parse_label_selector(f"{key}={value}").matches(labels)
    ne = parse_label_selector(f"{key}!={value}").matches(labels)
    assert eq != ne


@given(
    st.dictionaries(_label, _label, max_size=4), _label, st.lists(_label, min_size=1, max_size=3)
)
def test_in_and_notin_are_complements(labels, key, values):
    joined = ",".join(values)
    assert parse_label_selector(f"{key} in ({joined})").matches(labels) != parse_label_selector(
        f"{key} notin ({joined})"
    ).matches(labels)


@pytest.mark.parametrize("text", ["a in (", "=x", "a b", "Bad Key=1", "a in ()"])
def test_malformed_selectors_raise(text):
    with pytest.raises(SelectorError):
        parse_label_selector(text)


def test_tolerations_follow_key_operator_value_effect_rules():
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert tolerates([{"operator": "Exists"}], taint)
    assert tolerates([{"key": "nvidia.com/gpu", "operator": "Exists"}], taint)
    assert tolerates([{"key": "nvidia.com/gpu", "value": "present"}], taint)
    assert not tolerates([{"key": "nvidia.com/gpu", "value": "absent"}], taint)
    assert not tolerates(
        [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], taint
    )


def test_merge_patch_deletes_with_null_and_replaces_lists():
    doc = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert merge_patch(doc, {"a": {"b": None, "c": [3]}, "e": 2}) == {
        "a": {"c": [3]},
        "d": 1,
        "e": 2,
    }
    assert doc == {"a": {"b": 1, "c": [1, 2]}, "d": 1}  # inputs are not mutated


def test_json_patch_operations():
    doc = {"spec": {"tasks": [{"replicas": 1}]}}
    out = json_patch(
        doc,
        [
            {"op": "replace", "path": "/spec/tasks/0/replicas", "value": 3},
            {"op": "add", "path": "/spec/tasks/-", "value": {"replicas": 2}},
            {"op": "copy", "from": "/spec/tasks/1", "path": "/spec/extra"},
            {"op": "test", "path": "/spec/extra/replicas", "value": 2},
            {"op": "remove", "path": "/spec/tasks/1"},
        ],
    )
    assert out == {"spec": {"tasks": [{"replicas": 3}], "extra": {"replicas": 2}}}


def test_apply_tracks_ownership_and_removes_dropped_fields():
    base = {"apiVersion": "v1", "kind": "Queue", "metadata": {"name": "q"}}
    first, managed = server_side_apply(
        None, {**base, "spec": {"weight": 1, "capability": {"cpu": "1"}}}, "a", False, "t", "q"
    )
    current = {**first, "metadata": {**first["metadata"], "managedFields": managed}}
    second, managed = server_side_apply(
        current, {**base, "spec": {"weight": 2}}, "a", False, "t", "q"
    )
    assert second["spec"] == {"weight": 2}
    assert managed[-1]["fieldsV1"] == {"f:spec": {"f:weight": {}}}
