"""Delete one object or a collection: DeleteOptions (propagation, grace period, dry run),
finalizers, and the simulation's own cascade for jobs, pods and namespaces.
"""

from __future__ import annotations

import json
from typing import Any

from kubesim import admission
from kubesim.api.wire import Request, Response, Route, _true
from kubesim.clock import wall_text
from kubesim.errors import ApiError, bad_request
from kubesim.runtime import BUILTIN_NAMESPACES
from kubesim.store import ResourceType


class DeleteMixin:
    """Mixed into :class:`kubesim.api.core.Api`, whose ``__init__`` sets the state it reads."""

    def _delete_options(self, req: Request) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if req.body:
            try:
                body = json.loads(req.body)
            except ValueError as exc:
                raise bad_request(f"invalid DeleteOptions: {exc}") from exc
            if isinstance(body, dict):
                options.update({k: v for k, v in body.items() if v is not None})
        for key in ("propagationPolicy", "gracePeriodSeconds", "dryRun", "orphanDependents"):
            if key in req.query:
                options[key] = req.query[key]
        if _true(str(options.get("orphanDependents", ""))):
            options.setdefault("propagationPolicy", "Orphan")
        policy = options.get("propagationPolicy")
        if policy is not None and policy not in ("Background", "Foreground", "Orphan"):
            raise bad_request(
                f"propagationPolicy {policy!r} is not one of Background, Foreground, Orphan"
            )
        dry = options.get("dryRun")
        options["dryRun"] = dry == "All" or (isinstance(dry, list) and "All" in dry)
        return options

    def delete(self, req: Request, route: Route) -> Response:
        """DELETE one object, with propagationPolicy and gracePeriodSeconds."""
        rt = route.rt
        assert rt is not None
        options = self._delete_options(req)
        with self.store.lock:
            entry = self._entry(route)
            if options["dryRun"]:
                return Response(200, entry.raw)
            final = self._delete_one(rt, entry.obj, options)
        return self._ok(final if final is not None else entry.obj)

    def _delete_one(
        self, rt: ResourceType, obj: dict[str, Any], options: dict[str, Any]
    ) -> dict[str, Any] | None:
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        if rt is self.types.jobs:
            return self.sim.delete_job(
                namespace, name, options.get("propagationPolicy") or "Background"
            )
        if rt is self.types.pods:
            grace = options.get("gracePeriodSeconds")
            pod = self.sim.pod(namespace, name)
            if pod is None:
                return self.store.delete(rt, namespace, name)
            return self.sim.delete_pod(pod, grace=float(grace) if grace is not None else None)
        if rt is self.types.namespaces:
            if name in BUILTIN_NAMESPACES:
                raise ApiError(
                    403,
                    "Forbidden",
                    f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                    details={"name": name, "kind": "namespaces"},
                )
            return self.sim.delete_namespace(name)
        if rt is self.types.queues:
            admission.validate_queue_delete(name, self._queues())
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return obj
            return self.store.replace(
                rt, {**obj, "metadata": {**meta, "deletionTimestamp": wall_text()}}
            )
        return self.store.delete(rt, namespace, name)

    def delete_collection(self, req: Request, route: Route) -> Response:
        """DELETE a collection: every object matching the selectors; returns them as a list."""
        rt = route.rt
        assert rt is not None
        label, fields = self._selectors(req, rt)
        options = self._delete_options(req)
        with self.store.lock:
            result = self.store.list(rt, route.namespace, label, fields)
            deleted = []
            for entry in result.entries:
                if options["dryRun"]:
                    deleted.append(entry.obj)
                    continue
                final = self._delete_one(rt, entry.obj, options)
                deleted.append(final if final is not None else entry.obj)
        return self._ok(
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self.store.rv)},
                "items": deleted,
            }
        )
