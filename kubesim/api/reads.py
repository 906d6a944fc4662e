"""Reads: GET one object, list a collection (selectors, pages), and either as a Table
(``kubectl get``). Lists join the entries' cached JSON, never re-serialising an object.
"""

from __future__ import annotations

import json
from typing import Any

from kubesim.api.wire import Request, Response, Route, _json
from kubesim.errors import bad_request, not_found
from kubesim.selectors import (
    FieldSelector,
    LabelSelector,
    parse_field_selector,
    parse_label_selector,
)
from kubesim.store import Entry, ResourceType
from kubesim.tables import TABLE_MEDIA
from kubesim.tables import table as make_table


class ReadsMixin:
    """Mixed into :class:`kubesim.api.core.Api`, whose ``__init__`` sets the state it reads."""

    def _key(self, route: Route) -> tuple[str, str]:
        rt = route.rt
        assert rt is not None and route.name is not None
        return (route.namespace or "") if rt.namespaced else "", route.name

    def _entry(self, route: Route) -> Entry:
        rt = route.rt
        assert rt is not None
        entry = self.store.entry(rt, *self._key(route))
        if entry is None:
            raise not_found(rt.plural, rt.group, route.name or "")
        return entry

    def _table(self, req: Request, route: Route, verb: str) -> Response:
        """``kubectl get``'s request: the object(s) as a meta.k8s.io/v1 Table."""
        rt = route.rt
        assert rt is not None
        include = req.query.get("includeObject") or "Metadata"
        if include not in ("None", "Metadata", "Object"):
            raise bad_request(
                f"includeObject must be one of None, Metadata or Object, got {include!r}"
            )
        if verb == "get":
            body = make_table(rt, [self._entry(route).obj], include=include)
            return Response(200, _json(body), TABLE_MEDIA)
        listed = json.loads(self.list(req, route).body)
        body = make_table(rt, listed["items"], include=include, metadata=listed["metadata"])
        return Response(200, _json(body), TABLE_MEDIA)

    def get(self, route: Route) -> Response:
        """GET one object (or its status subresource: the same object)."""
        return Response(200, self._entry(route).raw)

    def _selectors(self, req: Request, rt: ResourceType) -> tuple[LabelSelector, FieldSelector]:
        label = parse_label_selector(req.query.get("labelSelector"))
        fields = parse_field_selector(req.query.get("fieldSelector"), rt.fields)
        return label, fields

    def list(self, req: Request, route: Route) -> Response:
        """GET a collection: selectors, limit/continue, items joined from cached JSON."""
        rt = route.rt
        assert rt is not None
        label, fields = self._selectors(req, rt)
        limit_text = req.query.get("limit")
        try:
            limit = int(limit_text) if limit_text else None
        except ValueError as exc:
            raise bad_request(f"invalid limit {limit_text!r}") from exc
        result = self.store.list(
            rt,
            route.namespace,
            label,
            fields,
            limit if limit and limit > 0 else None,
            req.query.get("continue") or None,
        )
        meta: dict[str, Any] = {"resourceVersion": str(result.rv)}
        if result.continue_token:
            meta["continue"] = result.continue_token
            meta["remainingItemCount"] = result.remaining
        head = _json({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta})
        body = head[:-1] + b',"items":[' + b",".join(e.raw for e in result.entries) + b"]}"
        return Response(200, body)
