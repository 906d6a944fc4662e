"""Label selectors, field selectors, node selector terms and tolerations.

These are the matching rules the apiserver (list/watch filtering) and the scheduler (node
selection) share. Parsing happens once per request or per pod template; matching is a few
dict lookups, because the scheduler evaluates it for thousands of nodes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class SelectorError(ValueError):
    """A selector string the apiserver would answer with 400 BadRequest."""


@dataclass(frozen=True)
class Requirement:
    """One clause of a label selector: ``key op values``."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label map satisfies this clause (Kubernetes semantics for absent keys)."""
        present = self.key in labels
        if self.op == "=":
            return present and labels[self.key] in self.values
        if self.op == "in":
            return present and labels[self.key] in self.values
        if self.op == "!=":
            return not present or labels[self.key] not in self.values
        if self.op == "notin":
            return not present or labels[self.key] not in self.values
        if self.op == "exists":
            return present
        return not present  # "!"


@dataclass(frozen=True)
class LabelSelector:
    """A parsed ``labelSelector``: all requirements must match (an empty selector matches all)."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether the labels satisfy every requirement."""
        labels = labels or {}
        return all(req.matches(labels) for req in self.requirements)

    def equalities(self) -> list[tuple[str, str]]:
        """Single-valued ``key=value`` clauses, which the store answers from its label index."""
        return [
            (req.key, next(iter(req.values)))
            for req in self.requirements
            if req.op in ("=", "in") and len(req.values) == 1
        ]

    @property
    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.requirements


def _check_key(key: str) -> str:
    if not key or len(key.split("/")[-1]) > 63 or not _KEY.match(key):
        raise SelectorError(
            f"unable to parse requirement: invalid label key {key!r}: name part must consist of "
            "alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character"
        )
    return key


def _check_value(value: str) -> str:
    if len(value) > 63 or not _VALUE.match(value):
        raise SelectorError(
            f"unable to parse requirement: invalid label value: {value!r}: a valid label must be "
            "an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character"
        )
    return value


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside a ``(...)`` value set."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise SelectorError(f"unable to parse requirement: unbalanced parentheses in {text!r}")
    parts.append("".join(current))
    return parts


_SET_RE = re.compile(r"^\s*(?P<key>[^\s!=()]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_OP_RE = re.compile(r"^\s*(?P<key>[^\s!=()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)\s*$")


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse the ``labelSelector`` query syntax (equality- and set-based)."""
    if text is None or not text.strip():
        return LabelSelector()
    requirements: list[Requirement] = []
    for raw in _split_top_level(text):
        part = raw.strip()
        if not part:
            raise SelectorError(
                f"unable to parse requirement: found '', expected: identifier in {text!r}"
            )
        if match := _SET_RE.match(part):
            values = [v.strip() for v in match.group("values").split(",")]
            if values == [""]:
                raise SelectorError(
                    f"unable to parse requirement: for 'in', 'notin' operators, values set "
                    f"can't be empty in {part!r}"
                )
            requirements.append(
                Requirement(
                    _check_key(match.group("key")),
                    match.group("op"),
                    frozenset(_check_value(v) for v in values),
                )
            )
        elif match := _OP_RE.match(part):
            op = "!=" if match.group("op") == "!=" else "="
            requirements.append(
                Requirement(
                    _check_key(match.group("key")),
                    op,
                    frozenset([_check_value(match.group("value"))]),
                )
            )
        elif part.startswith("!"):
            requirements.append(Requirement(_check_key(part[1:].strip()), "!"))
        elif " " not in part and "=" not in part and "(" not in part:
            requirements.append(Requirement(_check_key(part), "exists"))
        else:
            raise SelectorError(f"unable to parse requirement: {part!r} is not a valid selector")
    return LabelSelector(tuple(requirements))


def selector_from_match(spec: Mapping[str, Any] | None) -> LabelSelector:
    """Build a selector from the object form (``matchLabels`` / ``matchExpressions``)."""
    spec = spec or {}
    reqs = [Requirement(k, "=", frozenset([v])) for k, v in (spec.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in spec.get("matchExpressions") or []:
        reqs.append(
            Requirement(expr["key"], ops[expr["operator"]], frozenset(expr.get("values") or []))
        )
    return LabelSelector(tuple(reqs))


@dataclass(frozen=True)
class FieldSelector:
    """A parsed ``fieldSelector``: ``(field, negate, value)`` triples, all must hold."""

    terms: tuple[tuple[str, bool, str], ...] = ()

    def matches(self, obj: Mapping[str, Any], getters: Mapping[str, Callable[[Any], str]]) -> bool:
        """Whether the object satisfies every term, using the resource's field getters."""
        for field, negate, value in self.terms:
            actual = getters[field](obj)
            if (actual == value) == negate:
                return False
        return True

    @property
    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.terms

    def exact(self, field: str) -> str | None:
        """The value of a positive ``field=value`` term, used to short-cut by-name lookups."""
        for name, negate, value in self.terms:
            if name == field and not negate:
                return value
        return None


def parse_field_selector(text: str | None, supported: Iterable[str]) -> FieldSelector:
    """Parse ``a=b,c!=d``; unknown fields are an error exactly as on a real apiserver."""
    if text is None or not text.strip():
        return FieldSelector()
    allowed = set(supported)
    terms = []
    for raw in re.split(r"(?<!\\),", text):
        part = raw.strip()
        match = re.match(r"^([^=!]+?)\s*(==|!=|=)\s*(.*)$", part)
        if not match:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = match.group(1).strip(), match.group(2), match.group(3).strip()
        if field not in allowed:
            raise SelectorError(f"field label not supported: {field}")
        terms.append((field, op == "!=", value.replace("\\,", ",").replace("\\=", "=")))
    return FieldSelector(tuple(terms))


def node_selector_term_matches(
    term: Mapping[str, Any], labels: Mapping[str, str], node_name: str
) -> bool:
    """One ``nodeSelectorTerm``: every matchExpression and matchField must hold."""
    for expr in term.get("matchExpressions") or []:
        if not _node_expr_matches(
            expr, labels.get(expr.get("key", "")), expr.get("key", "") in labels
        ):
            return False
    for expr in term.get("matchFields") or []:
        if expr.get("key") != "metadata.name" or not _node_expr_matches(expr, node_name, True):
            return False
    return bool(term.get("matchExpressions") or term.get("matchFields"))


def _node_expr_matches(expr: Mapping[str, Any], value: str | None, present: bool) -> bool:
    op = expr.get("operator")
    values = expr.get("values") or []
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            left, right = int(value or ""), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether any toleration covers the taint (key/operator/value/effect rules of the API)."""
    for tol in tolerations:
        effect = tol.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = tol.get("key") or ""
        operator = tol.get("operator") or "Equal"
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False
