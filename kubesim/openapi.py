"""OpenAPI v2 and v3 documents for what kubesim serves, so ``kubectl`` validates and explains.

``kubectl apply/create`` (without ``--validate=false``) first asks ``/openapi/v3`` whether the
server takes ``fieldValidation`` on the PATCH of the object's kind; when it does, kubectl leaves
validation to the server (kubesim prunes and validates custom objects itself) and never needs
the v2 document. ``kubectl explain`` reads the same per group-version v3 documents. v2 is served
as JSON (``Accept: application/json``); kubectl only asks v2 in protobuf, as a fallback when v3
fails, and gets 406 here (kubesim has no protobuf encoder).

The schemas are real ones:

* core and ``networking.k8s.io`` kinds come from Kubernetes v1.31's own definitions, trimmed to
  what the served kinds reach and stored in ``openapi_core.json.gz`` (regenerate with
  ``python -m kubesim.openapi``, which needs the dev-only ``kubernetes-validate`` package);
* custom resources use their CRD's ``openAPIV3Schema`` (Volcano v1.15.1), as the apiserver
  publishes it: ``metadata`` points at ObjectMeta and the kind is tagged with
  ``x-kubernetes-group-version-kind``.

Paths list each served verb with ``x-kubernetes-action`` and ``x-kubernetes-group-version-kind``
and the query parameters kubesim honours (``dryRun``, ``fieldManager``, ``fieldValidation``...).
"""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import json
import sys
from importlib import resources
from typing import Any

from kubesim.store import ResourceType

CORE_FILE = "openapi_core.json.gz"
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
KUBE_VERSION = "v1.31.0"


@functools.lru_cache(maxsize=1)
def core_definitions() -> dict[str, Any]:
    """Swagger 2.0 definitions of the built-in kinds (``#/definitions/...`` references)."""
    raw = (resources.files("kubesim") / CORE_FILE).read_bytes()
    return json.loads(gzip.decompress(raw))


def _reverse_group(group: str) -> str:
    return ".".join(reversed(group.split(".")))


def definition_name(rt: ResourceType, list_kind: bool = False) -> str:
    """The schema name the apiserver uses for a kind (``io.k8s.api.core.v1.Pod``...)."""
    kind = rt.list_kind if list_kind else rt.kind
    if rt.crd is None:
        package = "core" if not rt.group else rt.group.split(".")[0]
        return f"io.k8s.api.{package}.{rt.version}.{kind}"
    return f"{_reverse_group(rt.group)}.{rt.version}.{kind}"


def _gvk(rt: ResourceType, kind: str | None = None) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "kind": kind or rt.kind}


def _crd_schemas(rt: ResourceType, ref: str) -> dict[str, dict[str, Any]]:
    """A CRD's object and list schemas, as the apiserver publishes them."""
    crd = rt.crd
    schema = copy.deepcopy(crd.schema)
    props = schema.setdefault("properties", {})
    props["metadata"] = {
        "description": "Standard object's metadata. More info: https://git.k8s.io/community/"
        "contributors/devel/sig-architecture/api-conventions.md#metadata",
        **_ref(ref, META + "ObjectMeta"),
    }
    schema["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    listing = {
        "description": f"{rt.list_kind} is a list of {rt.kind}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion of the list"},
            "kind": {"type": "string", "description": "Kind of the list"},
            "items": {
                "type": "array",
                "description": f"List of {rt.plural}.",
                "items": _ref(ref, definition_name(rt)),
            },
            "metadata": _ref(ref, META + "ListMeta"),
        },
        "x-kubernetes-group-version-kind": [_gvk(rt, rt.list_kind)],
    }
    return {definition_name(rt): schema, definition_name(rt, True): listing}


def _ref(prefix: str, name: str) -> dict[str, Any]:
    if prefix == "#/components/schemas/":
        return {"allOf": [{"$ref": prefix + name}]}
    return {"$ref": prefix + name}


_COMMON = {
    "pretty": "If 'true', then the output is pretty printed.",
    "dryRun": "When present, indicates that modifications should not be persisted. Valid "
    "values are: - All: all dry run stages will be processed",
    "fieldManager": "fieldManager is a name associated with the actor or entity that is "
    "making these changes.",
    "fieldValidation": "fieldValidation instructs the server on how to handle objects in the "
    "request containing unknown or duplicate fields. Valid values are: Ignore, Warn (the "
    "default) and Strict.",
    "force": 'Force is going to "force" Apply requests.',
    "labelSelector": "A selector to restrict the list of returned objects by their labels.",
    "fieldSelector": "A selector to restrict the list of returned objects by their fields.",
    "limit": "limit is a maximum number of responses to return for a list call.",
    "continue": "The continue option should be set when retrieving more results from the server.",
    "resourceVersion": "resourceVersion sets a constraint on what resource versions a request "
    "may be served from.",
    "watch": "Watch for changes to the described resources.",
    "timeoutSeconds": "Timeout for the list/watch call.",
    "allowWatchBookmarks": 'allowWatchBookmarks requests watch events with type "BOOKMARK".',
    "gracePeriodSeconds": "The duration in seconds before the object should be deleted.",
    "propagationPolicy": "Whether and how garbage collection will be performed.",
}
_TYPES = {
    "limit": "integer",
    "timeoutSeconds": "integer",
    "gracePeriodSeconds": "integer",
    "watch": "boolean",
    "allowWatchBookmarks": "boolean",
    "force": "boolean",
}
_PARAMS = {
    "get": ("pretty",),
    "list": (
        "pretty",
        "allowWatchBookmarks",
        "continue",
        "fieldSelector",
        "labelSelector",
        "limit",
        "resourceVersion",
        "timeoutSeconds",
        "watch",
    ),
    "post": ("pretty", "dryRun", "fieldManager", "fieldValidation"),
    "put": ("pretty", "dryRun", "fieldManager", "fieldValidation"),
    "patch": ("pretty", "dryRun", "fieldManager", "fieldValidation", "force"),
    "delete": ("pretty", "dryRun", "gracePeriodSeconds", "propagationPolicy"),
    "deletecollection": (
        "pretty",
        "dryRun",
        "fieldSelector",
        "gracePeriodSeconds",
        "labelSelector",
        "propagationPolicy",
    ),
}


def _param(name: str, v3: bool) -> dict[str, Any]:
    kind = _TYPES.get(name, "string")
    out: dict[str, Any] = {"name": name, "in": "query", "description": _COMMON[name]}
    if v3:
        out["schema"] = {"type": kind, "uniqueItems": True}
    else:
        out["type"], out["uniqueItems"] = kind, True
    return out


def _operation(
    rt: ResourceType, action: str, verb: str, schema: str, ref: str, v3: bool
) -> dict[str, Any]:
    kind = rt.kind
    op_id = f"{action}{rt.group.split('.')[0].capitalize()}{rt.version.capitalize()}{kind}"
    body_ref = _ref(ref, schema)
    op: dict[str, Any] = {
        "description": f"{action} {rt.kind}",
        "operationId": op_id,
        "parameters": [_param(p, v3) for p in _PARAMS[verb]],
        "x-kubernetes-action": verb,
        "x-kubernetes-group-version-kind": _gvk(rt),
    }
    ok = {"description": "OK"}
    if v3:
        ok["content"] = {"application/json": {"schema": body_ref}}
        if verb in ("post", "put", "patch"):
            types = ["application/json"]
            if verb == "patch":
                # kubectl apply sends a strategic merge patch only where this lists it: built-in
                # kinds (custom resources take JSON merge patches, as the apiserver says)
                types = [
                    "application/apply-patch+yaml",
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    *(["application/strategic-merge-patch+json"] if rt.crd is None else []),
                ]
            op["requestBody"] = {
                "content": {
                    t: {"schema": body_ref if verb != "patch" else _ref(ref, META + "Patch")}
                    for t in types
                },
                "required": True,
            }
    else:
        ok["schema"] = body_ref
        if verb in ("post", "put", "patch"):
            op["parameters"].insert(
                0,
                {
                    "name": "body",
                    "in": "body",
                    "required": True,
                    "schema": body_ref if verb != "patch" else _ref(ref, META + "Patch"),
                },
            )
    op["responses"] = {"200": ok}
    return op


def _paths(rt: ResourceType, ref: str, v3: bool) -> dict[str, Any]:
    base = "/api/v1" if not rt.group else f"/apis/{rt.group}/{rt.version}"
    scoped = (
        f"{base}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{base}/{rt.plural}"
    )
    one, many = definition_name(rt), definition_name(rt, True)
    verbs = rt.verbs
    collection: dict[str, Any] = {}
    item: dict[str, Any] = {}
    if "list" in verbs:
        collection["get"] = _operation(rt, "list", "list", many, ref, v3)
    if "create" in verbs:
        collection["post"] = _operation(rt, "create", "post", one, ref, v3)
    if "deletecollection" in verbs:
        collection["delete"] = _operation(
            rt, "deletecollection", "deletecollection", META + "Status", ref, v3
        )
    if "get" in verbs:
        item["get"] = _operation(rt, "read", "get", one, ref, v3)
    if "update" in verbs:
        item["put"] = _operation(rt, "replace", "put", one, ref, v3)
    if "patch" in verbs:
        item["patch"] = _operation(rt, "patch", "patch", one, ref, v3)
    if "delete" in verbs:
        item["delete"] = _operation(rt, "delete", "delete", META + "Status", ref, v3)
    paths = {}
    if collection:
        paths[scoped] = collection
    if item:
        paths[scoped + "/{name}"] = item
    for sub in rt.subresources:
        if sub == "status":
            status = {k: v for k, v in item.items() if k in ("get", "put", "patch")}
            if status:
                paths[scoped + "/{name}/status"] = status
    if rt.namespaced and "list" in verbs:
        paths[f"{base}/{rt.plural}"] = {
            "get": _operation(rt, "list", "list", many, ref, v3)
            | {"operationId": f"list{rt.kind}ForAllNamespaces"}
        }
    return paths


def _closure(definitions: dict[str, Any], roots: list[str]) -> dict[str, Any]:
    """The definitions ``roots`` reach through ``$ref``."""
    seen: dict[str, Any] = {}

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            target = value.get("$ref")
            if isinstance(target, str):
                name = target.rsplit("/", 1)[-1]
                if name not in seen and name in definitions:
                    seen[name] = definitions[name]
                    walk(definitions[name])
            for child in value.values():
                walk(child)
        elif isinstance(value, list):
            for child in value:
                walk(child)

    for root in roots:
        if root in definitions and root not in seen:
            seen[root] = definitions[root]
            walk(definitions[root])
    return dict(sorted(seen.items()))


def _to_v3(value: Any) -> Any:
    """Swagger 2.0 schema -> OpenAPI 3.0 schema (references wrapped the apiserver's way)."""
    if isinstance(value, dict):
        target = value.get("$ref")
        if isinstance(target, str) and target.startswith("#/definitions/"):
            name = target[len("#/definitions/") :]
            rest = {k: _to_v3(v) for k, v in value.items() if k != "$ref"}
            return {"allOf": [{"$ref": "#/components/schemas/" + name}], **rest}
        return {k: _to_v3(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_v3(v) for v in value]
    return value


def _always_meta() -> list[str]:
    return [
        META + name
        for name in ("Status", "DeleteOptions", "WatchEvent", "Patch", "ListMeta", "ObjectMeta")
    ]


class OpenAPI:
    """The documents for one set of served types, built on first use and kept."""

    def __init__(self, types: list[ResourceType]) -> None:
        self.types = types
        self._v2: bytes | None = None
        self._v3: dict[str, bytes] = {}

    def _definitions(self, types: list[ResourceType]) -> dict[str, Any]:
        """Swagger 2.0 definitions for ``types`` and everything they reference."""
        core = core_definitions()
        defs: dict[str, Any] = {}
        roots = _always_meta()
        for rt in types:
            if rt.crd is None:
                roots += [definition_name(rt), definition_name(rt, True)]
            else:
                defs.update(_crd_schemas(rt, "#/definitions/"))
        defs.update(_closure(core, roots))
        # a CRD schema references ObjectMeta and ListMeta only, both in the closure
        return dict(sorted(defs.items()))

    def v2(self) -> bytes:
        """``/openapi/v2``: one Swagger 2.0 document for everything."""
        if self._v2 is None:
            paths: dict[str, Any] = {}
            for rt in self.types:
                paths.update(_paths(rt, "#/definitions/", v3=False))
            doc = {
                "swagger": "2.0",
                "info": {"title": "Kubernetes", "version": KUBE_VERSION},
                "paths": dict(sorted(paths.items())),
                "definitions": self._definitions(self.types),
                "securityDefinitions": {
                    "BearerToken": {
                        "description": "Bearer Token authentication",
                        "type": "apiKey",
                        "name": "authorization",
                        "in": "header",
                    }
                },
                "security": [{"BearerToken": []}],
            }
            self._v2 = json.dumps(doc, separators=(",", ":")).encode()
        return self._v2

    def group_versions(self) -> dict[str, list[ResourceType]]:
        """Served types by v3 path (``api/v1``, ``apis/batch.volcano.sh/v1alpha1``)."""
        out: dict[str, list[ResourceType]] = {}
        for rt in self.types:
            key = "api/v1" if not rt.group else f"apis/{rt.group}/{rt.version}"
            out.setdefault(key, []).append(rt)
        return out

    def v3(self, gv_path: str) -> bytes | None:
        """``/openapi/v3/<gv_path>``: the OpenAPI 3.0 document of one group-version."""
        cached = self._v3.get(gv_path)
        if cached is not None:
            return cached
        types = self.group_versions().get(gv_path)
        if types is None:
            return None
        paths: dict[str, Any] = {}
        for rt in types:
            paths.update(_paths(rt, "#/components/schemas/", v3=True))
        schemas = _to_v3(self._definitions(types))
        doc = {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": KUBE_VERSION},
            "paths": dict(sorted(paths.items())),
            "components": {
                "schemas": schemas,
                "securitySchemes": {
                    "BearerToken": {
                        "type": "apiKey",
                        "description": "Bearer Token authentication",
                        "name": "authorization",
                        "in": "header",
                    }
                },
            },
            "security": [{"BearerToken": []}],
        }
        body = json.dumps(doc, separators=(",", ":")).encode()
        self._v3[gv_path] = body
        return body

    def v3_index(self) -> dict[str, Any]:
        """``/openapi/v3``: each group-version's URL, with a content hash for client caches."""
        paths = {}
        for gv_path in sorted(self.group_versions()):
            body = self.v3(gv_path) or b""
            digest = hashlib.sha512(body).hexdigest().upper()[:128]
            paths[gv_path] = {"serverRelativeURL": f"/openapi/v3/{gv_path}?hash={digest}"}
        return {"paths": paths}


# ---------------------------------------------------------------------------------------------
# regenerating the core definitions (development only)
# ---------------------------------------------------------------------------------------------

_CORE_ROOTS = [
    "io.k8s.api.core.v1." + kind
    for kind in ("Pod", "Node", "Namespace", "Event", "Secret", "ConfigMap", "Service")
] + ["io.k8s.api.networking.v1.Ingress"]


def _swagger(value: Any, key: str = "") -> Any:
    """kubernetes-validate's JSON Schema form -> the apiserver's Swagger 2.0 form."""
    if isinstance(value, dict):
        if "oneOf" in value and key:
            # Quantity and IntOrString are strings with a format in the apiserver's document
            fmt = "int-or-string" if key.endswith("IntOrString") else "quantity"
            return {"type": "string", "format": fmt}
        out = {}
        for k, v in value.items():
            if k == "$ref" and isinstance(v, str):
                out[k] = "#/definitions/" + v.rsplit("/", 1)[-1]
            elif k == "type" and isinstance(v, list):
                out[k] = next(t for t in v if t != "null")
            elif k == "properties":
                out[k] = {name: _swagger(prop) for name, prop in v.items()}
                for name in ("apiVersion", "kind"):
                    if isinstance(out[k].get(name), dict):
                        out[k][name].pop("enum", None)
            else:
                out[k] = _swagger(v)
        return out
    if isinstance(value, list):
        return [_swagger(v) for v in value]
    return value


def regenerate(version: str = "v1.31.0-local") -> bytes:
    """Build ``openapi_core.json.gz`` from kubernetes-validate's copy of the definitions."""
    import kubernetes_validate  # dev dependency; kubesim never imports this at run time

    folder = resources.files(kubernetes_validate) / "kubernetes-json-schema" / version
    source = json.loads((folder / "_definitions.json").read_text(encoding="utf-8"))["$defs"]
    definitions = {name: _swagger(schema, name) for name, schema in source.items()}
    roots = _CORE_ROOTS + [r + "List" for r in _CORE_ROOTS] + _always_meta()
    trimmed = _closure(definitions, roots)
    return gzip.compress(json.dumps(trimmed, sort_keys=True).encode(), mtime=0)


if __name__ == "__main__":  # pragma: no cover - development tool
    target = resources.files("kubesim") / CORE_FILE
    data = regenerate(*sys.argv[1:])
    with open(str(target), "wb") as handle:
        handle.write(data)
    print(f"wrote {target} ({len(data)} bytes)")
