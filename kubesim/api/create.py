"""Create (POST): decode, prune, default, validate, admit (the Volcano webhooks and each
built-in type's own rules), store; dry runs answer without storing. Custom objects' admission
is memoised per distinct body, so many jobs from one template pay for it once.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

from kubesim import admission
from kubesim.api.wire import JSON, Request, Response, Route
from kubesim.api.writes import _SERVER_META, _configmap_decodes
from kubesim.clock import wall_text
from kubesim.errors import bad_request, invalid, method_not_allowed
from kubesim.objects import clone
from kubesim.patch import record_update
from kubesim.schema import OBJECT_META_FIELDS
from kubesim.store import Entry, ResourceType
from kubesim.validation import (
    configmap_causes,
    ingress_causes,
    metadata_causes,
    secret_admitted,
    secret_causes,
    service_admitted,
    service_causes,
    service_name_causes,
)


def _random_suffix() -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(random.choice(alphabet) for _ in range(5))  # noqa: S311 - names, not secrets


def _dry_uid() -> str:
    return str(uuid.uuid4())


class CreateMixin:
    """Mixed into :class:`kubesim.api.core.Api`, whose ``__init__`` sets the state it reads."""

    def create(self, req: Request, route: Route) -> Response:
        """POST: decode, prune, default, validate, admit, store (201)."""
        rt = route.rt
        assert rt is not None
        mode = self._field_validation(req)
        obj = self._decode_object(req, rt)
        warnings: list[str] = []
        dry_run = req.query.get("dryRun") == "All"
        meta = obj["metadata"]
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != route.namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = route.namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{_random_suffix()}"
        for key in _SERVER_META:
            meta.pop(key, None)
        if rt.crd is not None:
            created = self._admit_custom(rt, obj, mode, warnings)
        else:
            self._prune(rt, obj, mode, warnings)
            created = self._admit_create(rt, obj, req)
        with self.store.lock:
            self._check_namespace(rt, route.namespace, str(meta.get("name")))
            if rt is self.types.jobs:
                admission.validate_job_create(created, self._queues())
            if rt is self.types.queues:
                admission.validate_queue(created, self._queues())
            created["metadata"]["managedFields"] = record_update(
                None, created, self._manager(req), wall_text()
            )
            if dry_run:
                key = (route.namespace or "", created["metadata"]["name"])
                if self.store.get(rt, *key) is not None:
                    from kubesim.errors import already_exists

                    raise already_exists(rt.plural, rt.group, key[1])
                created["metadata"].setdefault("uid", _dry_uid())
                created["metadata"].setdefault("creationTimestamp", wall_text())
                created["metadata"].setdefault("generation", 1)
                return self._ok(created, 201, self._warn_headers(warnings))
            stored = self.store.create(rt, created)
            body = self._raw(rt, stored)
        return Response(201, body, JSON, self._warn_headers(warnings))

    def _raw(self, rt: ResourceType, obj: dict[str, Any]) -> bytes:
        """The stored entry's JSON (serialised once, shared with lists and watches)."""
        meta = obj["metadata"]
        entry = self.store.entry(
            rt, meta.get("namespace", "") if rt.namespaced else "", meta["name"]
        )
        return entry.raw if entry is not None and entry.obj is obj else Entry(obj).raw

    def _admit_custom(
        self, rt: ResourceType, obj: dict[str, Any], mode: str, warnings: list[str]
    ) -> dict[str, Any]:
        """Prune, default, validate and mutate a custom object, memoised per distinct body.

        Everything here depends only on the body (the schema does not look into metadata),
        so a portal submitting many jobs from one template pays for it once.
        """
        crd = rt.crd
        assert crd is not None
        meta_unknown = [k for k in obj["metadata"] if k not in OBJECT_META_FIELDS]
        for key in meta_unknown:
            del obj["metadata"][key]
        body = {k: v for k, v in obj.items() if k != "metadata"}
        cache_key = (rt.key, json.dumps(body, sort_keys=True, separators=(",", ":"), default=str))
        with self._admitted_lock:
            cached = self._admitted.get(cache_key)
        if cached is None:
            work = clone(body)
            work["metadata"] = {"name": "x"}
            unknown = crd.prune(work).unknown
            if "status" in rt.subresources:
                work.pop("status", None)
            crd.apply_defaults(work)
            causes = crd.validate(work)
            if not causes:
                if rt is self.types.jobs:
                    admission.mutate_job(work)
                elif rt is self.types.queues:
                    admission.mutate_queue(work)
            work.pop("metadata")
            cached = (work, unknown, causes)
            with self._admitted_lock:
                if len(self._admitted) > 512:
                    self._admitted.pop(next(iter(self._admitted)))
                self._admitted[cache_key] = cached
        final, unknown, causes = cached
        self._report_unknown(rt, [f"metadata.{k}" for k in meta_unknown] + unknown, mode, warnings)
        causes = metadata_causes(obj["metadata"], rule=rt.name_rule) + list(causes)
        if causes:
            raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), causes)
        return {**clone(final), "metadata": obj["metadata"]}

    def _admit_create(self, rt: ResourceType, obj: dict[str, Any], req: Request) -> dict[str, Any]:
        """Type-specific defaults and validation up to (not including) the store."""
        if rt.crd is not None:
            if "status" in rt.subresources:
                obj.pop("status", None)
            rt.crd.apply_defaults(obj)
            self._validate(rt, obj)
            if rt is self.types.jobs:
                admission.mutate_job(obj)
            elif rt is self.types.queues:
                admission.mutate_queue(obj)
            return obj
        if rt is self.types.namespaces:
            self._validate(rt, obj)
            fresh = self.sim.new_namespace(obj["metadata"]["name"], obj["metadata"].get("labels"))
            fresh["metadata"]["annotations"] = obj["metadata"].get("annotations") or {}
            if not fresh["metadata"]["annotations"]:
                del fresh["metadata"]["annotations"]
            return fresh
        if rt is self.types.events:
            self._validate(rt, obj)
            obj.setdefault("count", 1)
            return obj
        if rt is self.types.secrets:
            self._validate(rt, obj)
            causes = secret_causes(obj)
            if causes:
                raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), causes)
            return secret_admitted(obj)
        if rt is self.types.configmaps:
            _configmap_decodes(obj)
            self._validate(rt, obj)
            causes = configmap_causes(obj)
            if causes:
                raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), causes)
            return obj
        if rt is self.types.services:
            self._validate(rt, obj)
            causes = service_name_causes(obj["metadata"]) + service_causes(obj)
            if causes:
                raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), causes)
            return service_admitted(obj, self.sim.next_cluster_ip())
        if rt is self.types.ingresses:
            self._validate(rt, obj)
            causes = ingress_causes(obj)
            if causes:
                raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), causes)
            obj["status"] = {"loadBalancer": {}}
            return obj
        raise method_not_allowed()
