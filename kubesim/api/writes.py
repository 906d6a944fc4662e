"""The steps every write shares: decode the body, prune unknown fields (Strict: 400, Warn: a
header), validate names and schemas (422), refuse a terminating namespace, name the field
manager. :mod:`kubesim.api.create`, :mod:`kubesim.api.update` and the delete path call them.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from kubesim.api.wire import JSON, Request
from kubesim.errors import ApiError, bad_request, invalid, not_found
from kubesim.patch import manager_from_user_agent
from kubesim.store import ResourceType
from kubesim.validation import metadata_causes

_SERVER_META = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
)


def _configmap_decodes(obj: dict[str, Any]) -> None:
    """A non-string value fails to decode into a ConfigMap (400, as Go's JSON decoder says)."""
    for part in ("data", "binaryData"):
        values = obj.get(part)
        if not isinstance(values, dict):
            continue
        for value in values.values():
            if not isinstance(value, str):
                got = "number" if isinstance(value, int | float) else type(value).__name__
                if isinstance(value, bool):
                    got = "bool"
                raise bad_request(
                    'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot '
                    f"unmarshal {got} into Go struct field ConfigMap.{part} of type string"
                )


class WriteStepsMixin:
    """Mixed into :class:`kubesim.api.core.Api`, whose ``__init__`` sets the state it reads."""

    def _decode(self, req: Request) -> Any:
        content_type = req.headers.get("content-type", JSON).split(";")[0].strip().lower()
        if not req.body:
            raise bad_request("the request body is empty")
        try:
            if "yaml" in content_type:
                return yaml.safe_load(req.body.decode())
            return json.loads(req.body)
        except (ValueError, yaml.YAMLError) as exc:
            raise bad_request(f"the body of the request could not be decoded: {exc}") from exc

    def _decode_object(self, req: Request, rt: ResourceType) -> dict[str, Any]:
        obj = self._decode(req)
        if not isinstance(obj, dict):
            raise bad_request(f"the body of the request must be a {rt.kind} object")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if rt.crd is not None and (not api_version or not kind):
            raise bad_request(
                f"Object 'Kind' is missing in '{json.dumps(obj)[:200]}'"
                if not kind
                else "Object 'apiVersion' is missing"
            )
        if api_version and api_version != rt.api_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})"
            )
        if kind and kind != rt.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        return obj

    @staticmethod
    def _field_validation(req: Request) -> str:
        mode = req.query.get("fieldValidation") or "Warn"
        if mode not in ("Strict", "Warn", "Ignore"):
            raise bad_request(
                f"fieldValidation must be one of Strict, Warn or Ignore, got {mode!r}"
            )
        return mode

    def _prune(self, rt: ResourceType, obj: dict[str, Any], mode: str, warnings: list[str]) -> None:
        """Unknown fields: Strict -> 400 BadRequest (as the apiserver), Warn -> header."""
        if rt.crd is None:
            return
        self._report_unknown(rt, rt.crd.prune(obj).unknown, mode, warnings)

    def _report_unknown(
        self, rt: ResourceType, unknown: list[str], mode: str, warnings: list[str]
    ) -> None:
        if not unknown:
            return
        texts = [f'unknown field "{path}"' for path in sorted(unknown)]
        if mode == "Strict":
            raise bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict '
                f"decoding error: {', '.join(texts)}"
            )
        if mode == "Warn":
            warnings.extend(texts)

    def _validate(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        causes = metadata_causes(obj["metadata"], rule=rt.name_rule)
        if rt.crd is not None:
            causes += rt.crd.validate(obj)
        if causes:
            raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), causes)

    def _check_namespace(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        if not rt.namespaced:
            return
        ns = self.store.get(self.types.namespaces, "", namespace or "")
        if ns is None:
            raise not_found("namespaces", "", namespace or "")
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f'{rt.key} "{name}" is forbidden: unable to create new content in namespace '
                f"{namespace} because it is being terminated",
                details={
                    "name": name,
                    "group": rt.group,
                    "kind": rt.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    def _queues(self) -> dict[str, dict[str, Any]]:
        return {q["metadata"]["name"]: q for q in self.store.select(self.types.queues)}

    def _warn_headers(self, warnings: list[str]) -> dict[str, str]:
        if not warnings:
            return {}
        return {"Warning": ", ".join(f"299 - {json.dumps(w)}" for w in warnings)}

    def _manager(self, req: Request) -> str:
        return req.query.get("fieldManager") or manager_from_user_agent(
            req.headers.get("user-agent")
        )
