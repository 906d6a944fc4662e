"""CRD schemas: pruning, defaulting and validation of custom objects.

The apiserver treats a structural CRD schema in three passes, and so do we: unknown fields are
pruned (or, with ``fieldValidation=Strict``, rejected), ``default`` values are filled in, and
then the object is validated against ``openAPIV3Schema``. Validation uses ``jsonschema``'s
Draft 7 validator, as ``../shared/k8s-reference/README.md`` recommends; its errors are rewritten
into the apiserver's ``field.Error`` wording so that the portal sees the same 422 text a real
cluster would send.

``jsonschema`` walks the 230 kB Volcano Job schema in Python on every create, so each CRD also
has a ``jsonschema_rs`` Draft 7 validator (Rust, a few microseconds a job) for the verdict. A body
it accepts has no schema errors; only a body it rejects goes through ``jsonschema``, which finds
and words every error as before.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jsonschema
import jsonschema_rs
import yaml

from kubesim.errors import invalid

CRD_FILES = (
    "batch.volcano.sh_jobs.yaml",
    "scheduling.volcano.sh_queues.yaml",
    "scheduling.volcano.sh_podgroups.yaml",
)

# ObjectMeta fields a client may send; anything else under the root metadata is unknown.
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)


def clone(value: Any) -> Any:
    """Deep copy of JSON-like data (cached results must never be shared)."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def format_path(parts: Any) -> str:
    """Render a JSON path the way ``field.Path`` does: ``spec.tasks[0].template``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _render(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    return "object"


def _cause(reason: str, field: str, message: str) -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}


def error_to_cause(error: jsonschema.ValidationError) -> dict[str, str]:
    """Translate one jsonschema error into an apiserver ``StatusCause``."""
    path = format_path(error.absolute_path)
    value = error.instance
    kind = error.validator
    if kind == "required":
        match = re.match(r"'(.+)' is a required property", error.message)
        missing = match.group(1) if match else str(error.validator_value)
        field = f"{path}.{missing}" if path else missing
        return _cause("FieldValueRequired", field, f"{field}: Required value")
    if kind == "type":
        got = _type_name(value)
        return _cause(
            "FieldValueTypeInvalid",
            path,
            f'{path}: Invalid value: "{got}": {path} in body must be of type '
            f'{error.validator_value}: "{got}"',
        )
    if kind == "enum":
        supported = ", ".join(_render(v) for v in error.validator_value)
        return _cause(
            "FieldValueNotSupported",
            path,
            f"{path}: Unsupported value: {_render(value)}: supported values: {supported}",
        )
    if kind == "pattern":
        detail = f"{path} in body should match '{error.validator_value}'"
    elif kind == "minimum":
        detail = f"{path} in body should be greater than or equal to {error.validator_value}"
    elif kind == "maximum":
        detail = f"{path} in body should be less than or equal to {error.validator_value}"
    elif kind == "maxLength":
        return _cause(
            "FieldValueTooLong",
            path,
            f"{path}: Too long: may not be more than {error.validator_value} bytes",
        )
    elif kind == "minLength":
        detail = f"{path} in body should be at least {error.validator_value} chars long"
    elif kind == "minItems":
        detail = f"{path} in body should have at least {error.validator_value} items"
        value = len(value) if isinstance(value, list) else value
    elif kind == "maxItems":
        detail = f"{path} in body should have at most {error.validator_value} items"
        value = len(value) if isinstance(value, list) else value
    else:
        detail = error.message
    return _cause("FieldValueInvalid", path, f"{path}: Invalid value: {_render(value)}: {detail}")


@dataclass
class PruneResult:
    """Unknown field paths found while pruning (already removed from the object)."""

    unknown: list[str]


class CRD:
    """One CustomResourceDefinition: names, scope, subresources and its schema machinery."""

    def __init__(
        self,
        document: dict[str, Any],
        rules: Callable[[dict[str, Any]], list[dict[str, str]]] | None = None,
    ) -> None:
        spec = document["spec"]
        version = spec["versions"][0]
        self.document = document
        self.group: str = spec["group"]
        self.version: str = version["name"]
        self.kind: str = spec["names"]["kind"]
        self.list_kind: str = spec["names"].get("listKind", self.kind + "List")
        self.plural: str = spec["names"]["plural"]
        self.singular: str = spec["names"].get("singular", self.kind.lower())
        self.short_names: list[str] = list(spec["names"].get("shortNames") or [])
        self.namespaced: bool = spec["scope"] == "Namespaced"
        self.status_subresource: bool = "status" in (version.get("subresources") or {})
        self.schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
        self.validator = jsonschema.Draft7Validator(self.schema)
        # The verdict, at Rust speed; formats are not checked, as Draft7Validator does not.
        self.verdict = jsonschema_rs.Draft7Validator(self.schema, validate_formats=False)
        # Rules beyond the schema (as a ValidatingAdmissionPolicy would add), run on bodies
        # the schema accepts; like the schema they look at the body only.
        self.rules = rules
        # Pruning, defaulting and validation are not memoised here: the portal's bodies all
        # differ (names, labels, env), so a cache keyed by the body cost a sorted dump per pass
        # and never hit. ``Api._admit_custom`` memoises the whole pipeline per distinct body.

    # -- pruning -------------------------------------------------------------------------
    def prune(self, obj: dict[str, Any]) -> PruneResult:
        """Remove fields the schema does not know, returning their paths (mutates ``obj``)."""
        unknown: list[str] = []
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            for key in [k for k in meta if k not in OBJECT_META_FIELDS]:
                unknown.append(f"metadata.{key}")
                del meta[key]
        body = {k: v for k, v in obj.items() if k != "metadata"}
        found: list[str] = []
        for name in [k for k in body if k not in self.schema.get("properties", {})]:
            found.append(name)
            del body[name]
        for name, sub in self.schema.get("properties", {}).items():
            if name != "metadata" and name in body:
                self._prune(sub, body[name], [name], found)
        _replace_body(obj, body)
        return PruneResult(unknown + found)

    def _prune(self, schema: dict[str, Any], value: Any, path: list[Any], out: list[str]) -> None:
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return
        if isinstance(value, dict):
            props = schema.get("properties")
            if props is not None:
                for key in list(value):
                    if key in props:
                        self._prune(props[key], value[key], [*path, key], out)
                    else:
                        out.append(format_path([*path, key]))
                        del value[key]
            elif isinstance(schema.get("additionalProperties"), dict):
                extra = schema["additionalProperties"]
                for key, item in value.items():
                    self._prune(extra, item, [*path, key], out)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                self._prune(schema["items"], item, [*path, index], out)

    # -- defaulting ----------------------------------------------------------------------
    def apply_defaults(self, obj: dict[str, Any]) -> None:
        """Fill ``default`` values of absent properties whose parent object is present."""
        body = {k: v for k, v in obj.items() if k != "metadata"}
        self._default(self.schema, body)
        _replace_body(obj, body)

    def _default(self, schema: dict[str, Any], value: Any) -> None:
        if isinstance(value, dict):
            props = schema.get("properties")
            if props:
                for key, sub in props.items():
                    if key not in value and "default" in sub:
                        value[key] = json.loads(json.dumps(sub["default"]))
                    if key in value and key != "metadata":
                        self._default(sub, value[key])
            elif isinstance(schema.get("additionalProperties"), dict):
                for item in value.values():
                    self._default(schema["additionalProperties"], item)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for item in value:
                self._default(schema["items"], item)

    # -- validation ----------------------------------------------------------------------
    def validate(self, obj: dict[str, Any]) -> list[dict[str, str]]:
        """Return StatusCauses for every schema violation (empty list when valid)."""
        body = {k: v for k, v in obj.items() if k != "metadata"}
        causes: list[dict[str, str]] = []
        if not self.accepts(body):
            causes = [error_to_cause(e) for e in self.validator.iter_errors(body)]
        if not causes and self.rules is not None:
            causes = self.rules(body)
        unique = {c["message"]: c for c in causes}
        return sorted(unique.values(), key=lambda c: (c["field"], c["message"]))

    def accepts(self, body: dict[str, Any]) -> bool:
        """``jsonschema_rs``'s verdict: True means ``jsonschema`` would find no error.

        False means it would (``tests/kubesim/test_schema_fast_path.py`` holds the two to the
        same verdict), and ``jsonschema`` is then asked for the causes.
        """
        try:
            return bool(self.verdict.is_valid(body))
        except (ValueError, TypeError):  # not JSON (a YAML date, a non-string key): let
            return False  # jsonschema find and word what is wrong with it

    def check(self, obj: dict[str, Any], name: str) -> None:
        """Raise 422 Invalid when the object fails the schema."""
        causes = self.validate(obj)
        if causes:
            raise invalid(self.kind, self.group, name, causes)


def _replace_body(obj: dict[str, Any], body: dict[str, Any]) -> None:
    """Put ``body`` back as everything but ``obj``'s metadata (which then comes first)."""
    for name in [k for k in obj if k != "metadata"]:
        del obj[name]
    obj.update(body)


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def load_crds() -> dict[str, CRD]:
    """Load the vendored Volcano v1.15.1 CRDs, keyed by plural.

    Parsed once per process (the job CRD is 230 kB of YAML) and shared by every server: a
    CRD is read-only after construction but for its compiled validator, built once under a lock.
    """
    out: dict[str, CRD] = {}
    folder = resources.files("kubesim") / "crds"
    for filename in CRD_FILES:
        text = (folder / filename).read_text(encoding="utf-8")
        document = yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader
        crd = CRD(document)
        out[crd.plural] = crd
    return out
