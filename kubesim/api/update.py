"""Update (PUT), patch (JSON, merge, strategic merge) and server-side apply: each builds the
candidate object, then one shared tail validates, admits and compare-and-swaps it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubesim import admission
from kubesim.api.wire import JSON, Request, Response, Route, _true
from kubesim.api.writes import _SERVER_META, _configmap_decodes
from kubesim.clock import wall_text
from kubesim.errors import bad_request, conflict, invalid, not_found, unsupported_media_type
from kubesim.objects import clone
from kubesim.patch import json_patch, merge_patch, record_update, server_side_apply
from kubesim.store import Entry, ResourceType
from kubesim.validation import configmap_causes, configmap_update_causes

PATCH_TYPES = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
]


_IMMUTABLE_META = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)


def _same(current: dict[str, Any], result: dict[str, Any]) -> bool:
    """Whether an update changes nothing but managedFields timestamps (then it is a no-op)."""

    def strip(obj: dict[str, Any]) -> dict[str, Any]:
        meta = {
            k: v
            for k, v in obj["metadata"].items()
            if k not in ("managedFields", "resourceVersion")
        }
        return {**obj, "metadata": meta}

    return strip(current) == strip(result)


class UpdateMixin:
    """Mixed into :class:`kubesim.api.core.Api`, whose ``__init__`` sets the state it reads."""

    def _merge_update(
        self, rt: ResourceType, current: dict[str, Any], new: dict[str, Any], sub: str | None
    ) -> dict[str, Any]:
        """The object an update would store: status/spec split, immutable metadata kept."""
        cur_meta = current["metadata"]
        new_meta = new.get("metadata") or {}
        if sub == "status":
            result = {**current, "metadata": dict(cur_meta)}
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            return result
        result = {k: v for k, v in new.items() if k != "status"}
        if "status" in current and ("status" in rt.subresources or rt.crd is None):
            result["status"] = current["status"]
        elif "status" in new and rt.crd is not None:
            result["status"] = new["status"]
        meta = {k: v for k, v in new_meta.items() if k not in _IMMUTABLE_META}
        for key in _IMMUTABLE_META:
            if key in cur_meta:
                meta[key] = cur_meta[key]
        meta["managedFields"] = cur_meta.get("managedFields", [])
        if new.get("spec") != current.get("spec"):
            meta["generation"] = int(cur_meta.get("generation", 1)) + 1
        result["metadata"] = meta
        result["apiVersion"], result["kind"] = current["apiVersion"], current["kind"]
        return result

    def _write(
        self,
        req: Request,
        route: Route,
        build: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        warnings: list[str],
        manager: str,
        operation: str = "Update",
        managed: Callable[[dict[str, Any], dict[str, Any]], list[dict[str, Any]]] | None = None,
    ) -> Response:
        """Shared tail of PUT and PATCH: build, validate, admit, compare-and-swap, store."""
        rt = route.rt
        assert rt is not None
        dry_run = req.query.get("dryRun") == "All"
        with self.store.lock:
            current = self._entry(route).obj
            candidate = build(clone(current))
            if candidate.get("metadata", {}).get("name", route.name) != route.name:
                raise bad_request(
                    f"the name of the object ({candidate['metadata'].get('name')}) does not match "
                    f"the name on the URL ({route.name})"
                )
            want_rv = (candidate.get("metadata") or {}).get("resourceVersion")
            if want_rv and want_rv != current["metadata"]["resourceVersion"]:
                raise conflict(rt.plural, rt.group, route.name or "")
            self._prune(rt, candidate, self._field_validation(req), warnings)
            result = self._merge_update(rt, current, candidate, route.sub)
            if rt.crd is not None:
                rt.crd.apply_defaults(result)
            self._validate(rt, result)
            self._admit_update(rt, current, result, route.sub)
            if managed is not None:
                result["metadata"]["managedFields"] = managed(current, result)
            elif route.sub is None:
                result["metadata"]["managedFields"] = record_update(
                    current, result, manager, wall_text(), operation=operation
                )
            if _same(current, result):
                return Response(200, self._entry(route).raw, JSON, self._warn_headers(warnings))
            if dry_run:
                return self._ok(result, 200, self._warn_headers(warnings))
            result["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            stored = self.store.replace(rt, result)
            meta = stored["metadata"]
            if (
                meta.get("deletionTimestamp")
                and not meta.get("finalizers")
                and (rt is not self.types.namespaces)
            ):
                stored = self.store.delete(rt, meta.get("namespace", ""), meta["name"]) or stored
            body = Entry(stored).raw
        return Response(200, body, JSON, self._warn_headers(warnings))

    def _admit_update(
        self, rt: ResourceType, current: dict[str, Any], result: dict[str, Any], sub: str | None
    ) -> None:
        if sub == "status":
            return
        if rt is self.types.jobs:
            admission.validate_job_update(current, result)
        elif rt is self.types.queues:
            admission.validate_queue(result, self._queues())
        elif rt is self.types.pods and result.get("spec") != current.get("spec"):
            raise invalid(
                "Pod",
                "",
                current["metadata"]["name"],
                [
                    {
                        "reason": "FieldValueForbidden",
                        "field": "spec",
                        "message": "spec: Forbidden: pod updates may not change fields other than "
                        "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                        "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
                        "existing tolerations) or `spec.terminationGracePeriodSeconds` "
                        "(kubesim allows metadata changes only)",
                    }
                ],
            )
        elif rt is self.types.namespaces and result.get("spec") != current.get("spec"):
            result["spec"] = current.get("spec")
        elif rt is self.types.configmaps:
            _configmap_decodes(result)
            causes = configmap_causes(result) + configmap_update_causes(current, result)
            if causes:
                raise invalid("ConfigMap", "", current["metadata"]["name"], causes)

    def update(self, req: Request, route: Route) -> Response:
        """PUT: replace the object (or its status)."""
        rt = route.rt
        assert rt is not None
        new = self._decode_object(req, rt)
        warnings: list[str] = []
        return self._write(
            req, route, lambda _current: new, warnings=warnings, manager=self._manager(req)
        )

    def patch(self, req: Request, route: Route) -> Response:
        """PATCH: JSON patch, merge patch, strategic merge (built-ins only) or apply."""
        rt = route.rt
        assert rt is not None
        content_type = req.headers.get("content-type", "").split(";")[0].strip().lower()
        accepted = list(PATCH_TYPES)
        if rt.crd is None:
            accepted.append("application/strategic-merge-patch+json")
        if content_type not in accepted:
            raise unsupported_media_type(content_type, accepted)
        warnings: list[str] = []
        manager = self._manager(req)
        if content_type == "application/apply-patch+yaml":
            return self._apply(req, route, warnings)
        body = self._decode(req)
        if content_type == "application/json-patch+json":
            return self._write(
                req, route, lambda cur: json_patch(cur, body), warnings=warnings, manager=manager
            )
        if not isinstance(body, dict):
            raise bad_request("a merge patch must be a JSON object")
        return self._write(
            req, route, lambda cur: merge_patch(cur, body), warnings=warnings, manager=manager
        )

    def _apply(self, req: Request, route: Route, warnings: list[str]) -> Response:
        """Server-side apply: create when absent, else merge with field ownership."""
        rt = route.rt
        assert rt is not None
        manager = req.query.get("fieldManager")
        if not manager:
            raise bad_request("PATCH " + req.path + ": fieldManager is required for apply requests")
        force = _true(req.query.get("force"))
        applied = self._decode_object(req, rt)
        applied["metadata"].setdefault("name", route.name)
        if rt.namespaced:
            applied["metadata"]["namespace"] = route.namespace
        qualified = f"{rt.key}/{route.name}"
        with self.store.lock:
            exists = self.store.entry(rt, *self._key(route)) is not None
            if not exists and route.sub is None:
                if "create" not in rt.verbs:
                    raise not_found(rt.plural, rt.group, route.name or "")
                self._prune(rt, applied, self._field_validation(req), warnings)
                obj, managed = server_side_apply(
                    None, applied, manager, force, wall_text(), qualified
                )
                for key in _SERVER_META:
                    obj["metadata"].pop(key, None)
                created = self._admit_create(rt, obj, req)
                self._check_namespace(rt, route.namespace, route.name or "")
                if rt is self.types.jobs:
                    admission.validate_job_create(created, self._queues())
                if rt is self.types.queues:
                    admission.validate_queue(created, self._queues())
                created["metadata"]["managedFields"] = managed
                if req.query.get("dryRun") == "All":
                    return self._ok(created, 201, self._warn_headers(warnings))
                stored = self.store.create(rt, created)
                return Response(201, Entry(stored).raw, JSON, self._warn_headers(warnings))
            self._prune(rt, applied, self._field_validation(req), warnings)
            holder: dict[str, Any] = {}

            def build(current: dict[str, Any]) -> dict[str, Any]:
                merged, managed = server_side_apply(
                    current, applied, manager, force, wall_text(), qualified
                )
                holder["managed"] = managed
                return merged

            return self._write(
                req,
                route,
                build,
                warnings=warnings,
                manager=manager,
                operation="Apply",
                managed=lambda _cur, _res: holder["managed"],
            )
