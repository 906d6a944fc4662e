"""Patch formats and server-side apply with field ownership.

Supported patch types, as the apiserver accepts them:

* ``application/merge-patch+json`` (RFC 7386).
* ``application/json-patch+json`` (RFC 6902: add, remove, replace, move, copy, test).
* ``application/strategic-merge-patch+json`` on built-in types only. kubesim treats it as a
  merge patch (lists are replaced, not merged by key) — enough for labels, taints and
  ``spec.unschedulable``; custom resources reject it with 415 as a real apiserver does.
* ``application/apply-patch+yaml`` (server-side apply). Ownership is tracked per manager as a
  set of leaf field paths and stored in ``metadata.managedFields`` in the ``FieldsV1`` format.
  Lists are atomic (owned as a whole). Conflicts (another manager owns a field and the applied
  value differs) answer 409 unless ``force=true``, which transfers ownership; fields the manager
  applied before and no longer applies are removed when nobody else owns them.
"""

from __future__ import annotations

from typing import Any

from kubesim.errors import ApiError, bad_request
from kubesim.objects import clone

Path = tuple[str, ...]

# Metadata the server owns; never part of managed fields.
_SERVER_META = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    }
)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``null`` deletes)."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(doc, list):
            doc = doc[int(part)]
        elif isinstance(doc, dict):
            doc = doc[part]
        else:
            raise KeyError(part)
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch; a failing operation is a 422 like the apiserver answers."""
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    doc = clone(doc)
    for op in operations:
        try:
            kind = op["op"]
            parts = _pointer(op["path"])
            if kind == "test":
                if _walk(doc, parts) != op.get("value"):
                    raise ApiError(
                        422,
                        "Invalid",
                        f"the server rejected our request due to an "
                        f"error in our request: testing value at {op['path']} failed",
                    )
                continue
            if kind in ("move", "copy"):
                source = _pointer(op["from"])
                value = clone(_walk(doc, source))
                if kind == "move":
                    parent = _walk(doc, source[:-1])
                    if isinstance(parent, list):
                        parent.pop(int(source[-1]))
                    else:
                        del parent[source[-1]]
                op = {"op": "add", "path": op["path"], "value": value}
                kind = "add"
            if not parts:
                if kind in ("add", "replace"):
                    doc = clone(op["value"])
                    continue
                raise bad_request("cannot remove the whole document")
            parent = _walk(doc, parts[:-1])
            last = parts[-1]
            if kind == "add":
                if isinstance(parent, list):
                    index = len(parent) if last == "-" else int(last)
                    parent.insert(index, clone(op["value"]))
                else:
                    parent[last] = clone(op["value"])
            elif kind == "replace":
                if isinstance(parent, list):
                    parent[int(last)] = clone(op["value"])
                else:
                    if last not in parent:
                        raise KeyError(last)
                    parent[last] = clone(op["value"])
            elif kind == "remove":
                if isinstance(parent, list):
                    parent.pop(int(last))
                else:
                    del parent[last]
            else:
                raise bad_request(f"unknown JSON patch operation {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(
                422,
                "Invalid",
                f"the server rejected our request due to an error in our request: "
                f"jsonpatch {op.get('op')} operation does not apply: doc is missing path: "
                f'"{op.get("path")}": {exc}',
            ) from exc
    return doc


# -- field ownership ----------------------------------------------------------------------
def leaf_paths(obj: Any, prefix: Path = ()) -> set[Path]:
    """Leaf field paths of an object; lists and empty maps are leaves (atomic)."""
    out: set[Path] = set()
    if isinstance(obj, dict) and obj:
        for key, value in obj.items():
            if not prefix and key in ("apiVersion", "kind", "status"):
                continue
            if prefix == ("metadata",) and key in _SERVER_META:
                continue
            out |= leaf_paths(value, (*prefix, key))
    elif prefix:
        out.add(prefix)
    return out


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    """Render paths as the FieldsV1 trie (``{"f:spec": {"f:weight": {}}}``)."""
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return root


def from_fields_v1(fields: dict[str, Any], prefix: Path = ()) -> set[Path]:
    """Parse a FieldsV1 trie back into leaf paths."""
    out: set[Path] = set()
    for key, child in (fields or {}).items():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        if child:
            out |= from_fields_v1(child, path)
        else:
            out.add(path)
    return out


def get_path(obj: Any, path: Path) -> Any:
    """The value at ``path``, or a sentinel-free ``None`` when absent."""
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


_MISSING = object()


def remove_path(obj: dict[str, Any], path: Path) -> None:
    """Delete the field at ``path`` and prune maps left empty by it."""
    parents = []
    node: Any = obj
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        parents.append((node, part))
        node = node[part]
    if isinstance(node, dict):
        node.pop(path[-1], None)
    for parent, part in reversed(parents):
        if parent[part] == {}:
            del parent[part]
        else:
            break


def deep_merge(base: Any, overlay: Any) -> Any:
    """Overlay maps recursively; lists and scalars replace."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = dict(base)
        for key, value in overlay.items():
            out[key] = deep_merge(base.get(key), value)
        return out
    return clone(overlay)


def _entries(meta: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(e) for e in meta.get("managedFields") or []]


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    now: str,
    *,
    operation: str = "Update",
    subresource: str | None = None,
) -> list[dict[str, Any]]:
    """managedFields after a non-apply write: ``manager`` takes the fields it changed."""
    new_paths = leaf_paths(new)
    changed = {p for p in new_paths if old is None or get_path(old, p) != get_path(new, p)}
    entries = _entries((old or {}).get("metadata") or {})
    out = []
    mine: set[Path] = set()
    for entry in entries:
        paths = from_fields_v1(entry.get("fieldsV1") or {}) & new_paths
        if entry.get("manager") == manager and entry.get("operation") == operation:
            mine |= paths
            continue
        paths -= changed
        if paths:
            out.append({**entry, "fieldsV1": to_fields_v1(paths)})
    mine |= changed
    if mine:
        entry = {
            "manager": manager,
            "operation": operation,
            "apiVersion": new.get("apiVersion", ""),
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(mine),
        }
        if subresource:
            entry["subresource"] = subresource
        out.append(entry)
    return out


def server_side_apply(
    current: dict[str, Any] | None,
    applied: dict[str, Any],
    manager: str,
    force: bool,
    now: str,
    qualified_name: str,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Merge an applied configuration; returns the new object and its managedFields."""
    applied_paths = leaf_paths(applied)
    if current is None:
        entry = {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": applied.get("apiVersion", ""),
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(applied_paths),
        }
        return clone(applied), [entry]
    entries = _entries(current.get("metadata") or {})
    conflicts: list[tuple[str, Path]] = []
    previous_mine: set[Path] = set()
    others: list[tuple[dict[str, Any], set[Path]]] = []
    for entry in entries:
        paths = from_fields_v1(entry.get("fieldsV1") or {})
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            previous_mine = paths
            continue
        for path in sorted(paths & applied_paths):
            if get_path(current, path) != get_path(applied, path):
                conflicts.append((str(entry.get("manager")), path))
        others.append((entry, paths))
    if conflicts and not force:
        detail = "\n".join(f'conflict with "{m}": .{".".join(p)}' for m, p in conflicts)
        plural = "conflicts" if len(conflicts) > 1 else "conflict"
        raise ApiError(
            409,
            "Conflict",
            f"Apply failed with {len(conflicts)} {plural}: {detail}",
            details={
                "name": qualified_name,
                "causes": [
                    {
                        "reason": "FieldManagerConflict",
                        "message": f'conflict with "{m}"',
                        "field": "." + ".".join(p),
                    }
                    for m, p in conflicts
                ],
            },
        )
    conflict_paths = {p for _, p in conflicts}
    kept: list[dict[str, Any]] = []
    owned_by_others: set[Path] = set()
    for entry, paths in others:
        paths = paths - conflict_paths
        owned_by_others |= paths
        if paths:
            kept.append({**entry, "fieldsV1": to_fields_v1(paths)})
    result = deep_merge(current, applied)
    for path in previous_mine - applied_paths - owned_by_others:
        remove_path(result, path)
    kept.append(
        {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": applied.get("apiVersion", ""),
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(applied_paths),
        }
    )
    return result, kept


def manager_from_user_agent(user_agent: str | None) -> str:
    """The default field manager: the User-Agent up to the first ``/`` (apiserver rule)."""
    if not user_agent:
        return "unknown"
    return user_agent.split("/", 1)[0][:128] or "unknown"
