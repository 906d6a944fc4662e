"""The object store: one revision counter, immutable object snapshots, indexes and history.

Design rules, chosen for 2,000 nodes and 20,000 pods:

* Objects are stored as plain dicts and are **never mutated** once stored. A writer builds a new
  dict (sharing unchanged sub-trees) and swaps it in. That is why a watch event, a list and a
  reader thread can all hold the same object without copying, and why each object's JSON is
  serialised at most once (:attr:`Entry.raw`).
* Every write takes the next value of a single ``resourceVersion`` counter, like etcd's revision,
  so versions are monotonic across all resources.
* Lookups used by the simulator and the portal are indexed: by namespace, by label
  ``key=value`` and by selected fields (``spec.nodeName``). No list is a scan of all objects
  unless the query really asks for everything.
* Each resource keeps its own bounded history of watch events. A watch from a version older than
  the oldest kept event is answered with ``410 Gone``, as the apiserver's watch cache does.

All methods must be called with :attr:`Store.lock` held by the caller or take it themselves; the
lock is re-entrant and shared with the simulator, which keeps the whole model consistent without
finer-grained locking (the GIL would serialise the work anyway).
"""

from __future__ import annotations

import base64
import binascii
import json
import queue
import random
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kubesim.errors import ApiError, bad_request, gone
from kubesim.selectors import FieldSelector, LabelSelector

ObjectKey = tuple[str, str]


_uid_random = random.Random()  # noqa: S311 - object identifiers, not secrets


def new_uid() -> str:
    """A random (version 4 layout) UID; several times faster than uuid4()."""
    bits = _uid_random.getrandbits(128)
    text = f"{bits:032x}"
    return f"{text[:8]}-{text[8:12]}-4{text[13:16]}-{'89ab'[bits & 3]}{text[17:20]}-{text[20:]}"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class ResourceType:
    """How one kind of object is served: names, scope, verbs, subresources, selectable fields."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    verbs: frozenset[str]
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    fields: dict[str, Callable[[dict], str]] = field(default_factory=dict, hash=False)
    indexed_fields: tuple[str, ...] = ()
    crd: Any = field(default=None, hash=False, compare=False)
    name_rule: str = "subdomain"
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        """``v1`` or ``group/version``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Unique name in the store and in messages (``jobs.batch.volcano.sh``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        """``PodList``, ``JobList``..."""
        return self.kind + "List"


class Entry:
    """A stored object and its lazily computed JSON encoding."""

    __slots__ = ("_raw", "obj")

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self._raw: bytes | None = None

    @property
    def raw(self) -> bytes:
        """The object's compact JSON, computed once (objects are immutable)."""
        if self._raw is None:
            self._raw = _dumps(self.obj)
        return self._raw


class WatchEvent:
    """One change: ADDED, MODIFIED or DELETED, with the previous state for selector moves."""

    __slots__ = ("entry", "old", "rv", "type")

    def __init__(self, type_: str, rv: int, entry: Entry, old: Entry | None) -> None:
        self.type = type_
        self.rv = rv
        self.entry = entry
        self.old = old


class Watcher:
    """A registered watch: the store pushes events into its queue, the HTTP thread drains it."""

    def __init__(self, rt: ResourceType, namespace: str | None) -> None:
        self.rt = rt
        self.namespace = namespace
        self.queue: queue.SimpleQueue[WatchEvent | None] = queue.SimpleQueue()
        self.closed = False

    def push(self, event: WatchEvent) -> None:
        """Enqueue an event unless it belongs to another namespace."""
        if self.namespace is not None:
            meta = event.entry.obj.get("metadata", {})
            if meta.get("namespace") != self.namespace:
                return
        self.queue.put(event)

    def close(self) -> None:
        """Wake the HTTP thread so it ends the stream (used by stop() and forced 410s)."""
        self.closed = True
        self.queue.put(None)


class Collection:
    """All objects of one resource type, plus indexes, history and watchers."""

    def __init__(self, rt: ResourceType, history_size: int) -> None:
        self.rt = rt
        self.objects: dict[ObjectKey, Entry] = {}
        self.by_ns: dict[str, dict[str, Entry]] = defaultdict(dict)
        self.labels: dict[tuple[str, str], set[ObjectKey]] = defaultdict(set)
        self.field_index: dict[str, dict[str, set[ObjectKey]]] = {
            name: defaultdict(set) for name in rt.indexed_fields
        }
        self.history: deque[WatchEvent] = deque()
        self.history_size = history_size
        self.floor = 0  # events with rv <= floor may be missing from history
        self.watchers: set[Watcher] = set()

    def _index_labels(self, key: ObjectKey, labels: dict[str, str] | None, add: bool) -> None:
        for pair in (labels or {}).items():
            if add:
                self.labels[pair].add(key)
            else:
                bucket = self.labels.get(pair)
                if bucket is not None:
                    bucket.discard(key)
                    if not bucket:
                        del self.labels[pair]

    def _index_field(self, key: ObjectKey, name: str, value: str, add: bool) -> None:
        index = self.field_index[name]
        if add:
            index[value].add(key)
        else:
            bucket = index.get(value)
            if bucket is not None:
                bucket.discard(key)
                if not bucket:
                    del index[value]

    def _index(self, key: ObjectKey, obj: dict[str, Any], add: bool) -> None:
        self._index_labels(key, obj.get("metadata", {}).get("labels"), add)
        for name in self.field_index:
            self._index_field(key, name, self.rt.fields[name](obj), add)

    def put(self, key: ObjectKey, entry: Entry, old: Entry | None) -> None:
        if old is not None:
            old_labels = old.obj.get("metadata", {}).get("labels")
            new_labels = entry.obj.get("metadata", {}).get("labels")
            if old_labels is not new_labels and old_labels != new_labels:
                self._index_labels(key, old_labels, add=False)
                self._index_labels(key, new_labels, add=True)
            for name in self.field_index:
                getter = self.rt.fields[name]
                before, after = getter(old.obj), getter(entry.obj)
                if before != after:
                    self._index_field(key, name, before, add=False)
                    self._index_field(key, name, after, add=True)
        else:
            self._index(key, entry.obj, add=True)
        self.objects[key] = entry
        self.by_ns[key[0]][key[1]] = entry

    def remove(self, key: ObjectKey) -> Entry | None:
        entry = self.objects.pop(key, None)
        if entry is not None:
            self._index(key, entry.obj, add=False)
            names = self.by_ns.get(key[0])
            if names is not None:
                names.pop(key[1], None)
                if not names:
                    del self.by_ns[key[0]]
        return entry

    def record(self, event: WatchEvent) -> None:
        while self.history and len(self.history) >= self.history_size:
            self.floor = self.history.popleft().rv
        self.history.append(event)
        for watcher in list(self.watchers):
            watcher.push(event)


def encode_continue(rv: int, key: ObjectKey) -> str:
    """A continue token in the apiserver's format: base64 of ``{"v", "rv", "start"}``."""
    payload = {"v": "meta.k8s.io/v1", "rv": rv, "start": f"{key[0]}/{key[1]}\x00"}
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, ObjectKey]:
    """Parse a continue token, raising 400 for garbage."""
    try:
        padded = token + "=" * (-len(token) % 4)
        payload = json.loads(base64.urlsafe_b64decode(padded.encode()))
        start = str(payload["start"]).rstrip("\x00")
        namespace, _, name = start.partition("/")
        return int(payload["rv"]), (namespace, name)
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise bad_request(f"continue key is not valid: {exc}") from exc


@dataclass
class ListResult:
    """One page of a list: the entries, the list's resourceVersion and paging metadata."""

    rv: int
    entries: list[Entry]
    continue_token: str | None = None
    remaining: int | None = None


class Store:
    """Objects of every registered resource, guarded by one re-entrant lock."""

    def __init__(self, *, history_size: int = 10_000, now: Callable[[], str]) -> None:
        self.lock = threading.RLock()
        self.rv = 1
        self.history_size = history_size
        self.now = now
        self.types: dict[str, ResourceType] = {}
        self.collections: dict[str, Collection] = {}
        self.listeners: list[Callable[[ResourceType, WatchEvent], None]] = []

    # -- registry ------------------------------------------------------------------------
    def register(self, rt: ResourceType) -> None:
        """Add a resource type (called once per type at start-up)."""
        self.types[rt.key] = rt
        self.collections[rt.key] = Collection(rt, self.history_size)

    def collection(self, rt: ResourceType) -> Collection:
        """The collection of a resource type."""
        return self.collections[rt.key]

    # -- reads ---------------------------------------------------------------------------
    def entry(self, rt: ResourceType, namespace: str, name: str) -> Entry | None:
        """The stored entry for one object, or None."""
        return self.collections[rt.key].objects.get((namespace, name))

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored (read-only!) object, or None."""
        entry = self.collections[rt.key].objects.get((namespace, name))
        return entry.obj if entry is not None else None

    def select(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Objects in a namespace matching label equalities, via the label index (unsorted)."""
        col = self.collections[rt.key]
        if labels:
            keys: set[ObjectKey] | None = None
            for pair in labels.items():
                bucket = col.labels.get(pair, set())
                keys = set(bucket) if keys is None else keys & bucket
            out = []
            for key in keys or ():
                if namespace is None or key[0] == namespace:
                    out.append(col.objects[key].obj)
            return out
        if namespace is not None:
            return [e.obj for e in col.by_ns.get(namespace, {}).values()]
        return [e.obj for e in col.objects.values()]

    def _candidates(
        self,
        col: Collection,
        namespace: str | None,
        label: LabelSelector,
        field: FieldSelector,
    ) -> Iterable[tuple[ObjectKey, Entry]]:
        name = field.exact("metadata.name")
        if name is not None:
            if namespace is not None:
                entry = col.objects.get((namespace, name))
                return [((namespace, name), entry)] if entry else []
            return [(k, e) for k, e in col.objects.items() if k[1] == name]
        keysets: list[set[ObjectKey]] = [col.labels.get(p, set()) for p in label.equalities()]
        for fname in col.field_index:
            value = field.exact(fname)
            if value is not None:
                keysets.append(col.field_index[fname].get(value, set()))
        if keysets:
            smallest = min(keysets, key=len)
            return [
                (k, col.objects[k])
                for k in smallest
                if (namespace is None or k[0] == namespace) and k in col.objects
            ]
        if namespace is not None:
            return [((namespace, n), e) for n, e in col.by_ns.get(namespace, {}).items()]
        return col.objects.items()

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label: LabelSelector | None = None,
        field: FieldSelector | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListResult:
        """A sorted, filtered page of objects; raises 410 for a continue token past history."""
        label = label or LabelSelector()
        field = field or FieldSelector()
        col = self.collections[rt.key]
        with self.lock:
            list_rv = self.rv
            start: ObjectKey | None = None
            if continue_token:
                token_rv, start = decode_continue(continue_token)
                if token_rv < col.floor:
                    raise gone(
                        "The provided continue parameter is too old to display a consistent list "
                        "result. You can start a new list without the continue parameter, or use "
                        "the continue token in this response to retrieve the remainder of the "
                        "results. Continuing with the provided token results in an inconsistent "
                        "list - objects that were created, modified, or deleted between the time "
                        "the first chunk was returned and now may show up in the list."
                    )
                list_rv = token_rv
            matched = [
                (key, entry)
                for key, entry in self._candidates(col, namespace, label, field)
                if (start is None or key > start)
                and (label.empty or label.matches(entry.obj.get("metadata", {}).get("labels")))
                and (field.empty or field.matches(entry.obj, rt.fields))
            ]
        matched.sort(key=lambda item: item[0])
        if limit and len(matched) > limit:
            page = matched[:limit]
            return ListResult(
                list_rv,
                [entry for _, entry in page],
                encode_continue(list_rv, page[-1][0]),
                len(matched) - limit,
            )
        return ListResult(list_rv, [entry for _, entry in matched])

    # -- writes --------------------------------------------------------------------------
    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _emit(self, rt: ResourceType, event: WatchEvent) -> None:
        self.collections[rt.key].record(event)
        for listener in self.listeners:
            listener(rt, event)

    def create(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new object (caller owns ``obj`` and its metadata dict). 409 if it exists."""
        from kubesim.errors import already_exists

        meta = obj["metadata"]
        key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        with self.lock:
            col = self.collections[rt.key]
            if key in col.objects:
                raise already_exists(rt.plural, rt.group, key[1])
            rv = self._next_rv()
            meta.setdefault("uid", new_uid())
            meta.setdefault("creationTimestamp", self.now())
            meta.setdefault("generation", 1)
            meta["resourceVersion"] = str(rv)
            obj.setdefault("apiVersion", rt.api_version)
            obj.setdefault("kind", rt.kind)
            entry = Entry(obj)
            col.put(key, entry, None)
            self._emit(rt, WatchEvent("ADDED", rv, entry, None))
            return obj

    def replace(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Swap in a new version of an existing object (a fresh dict with a fresh metadata)."""
        meta = obj["metadata"]
        key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        with self.lock:
            col = self.collections[rt.key]
            old = col.objects.get(key)
            if old is None:
                from kubesim.errors import not_found

                raise not_found(rt.plural, rt.group, key[1])
            rv = self._next_rv()
            meta["resourceVersion"] = str(rv)
            entry = Entry(obj)
            col.put(key, entry, old)
            self._emit(rt, WatchEvent("MODIFIED", rv, entry, old))
            return obj

    def delete(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        """Remove an object now; the DELETED event carries the deletion's resourceVersion."""
        key = (namespace if rt.namespaced else "", name)
        with self.lock:
            col = self.collections[rt.key]
            old = col.remove(key)
            if old is None:
                return None
            rv = self._next_rv()
            final = {**old.obj, "metadata": {**old.obj["metadata"], "resourceVersion": str(rv)}}
            self._emit(rt, WatchEvent("DELETED", rv, Entry(final), old))
            return final

    # -- watch ---------------------------------------------------------------------------
    def watch(
        self, rt: ResourceType, namespace: str | None, since: int | None
    ) -> tuple[Watcher, list[WatchEvent], int]:
        """Register a watcher; returns it, the events to replay first, and the start version.

        ``since=None`` means "current state first": a synthetic ADDED per object, as the
        apiserver does for a watch without resourceVersion (or with ``0``).
        """
        with self.lock:
            col = self.collections[rt.key]
            if since is None:
                source = (
                    col.by_ns.get(namespace, {}).values()
                    if namespace is not None
                    else col.objects.values()
                )
                initial = [
                    WatchEvent("ADDED", int(e.obj["metadata"]["resourceVersion"]), e, None)
                    for e in source
                ]
                initial.sort(key=lambda ev: ev.rv)
            else:
                if since < col.floor:
                    raise gone(f"too old resource version: {since} ({col.floor + 1})")
                initial = []
                for event in reversed(col.history):
                    if event.rv <= since:
                        break
                    if namespace is None or (
                        event.entry.obj.get("metadata", {}).get("namespace") == namespace
                    ):
                        initial.append(event)
                initial.reverse()
            watcher = Watcher(rt, namespace)
            col.watchers.add(watcher)
            return watcher, initial, self.rv

    def unwatch(self, watcher: Watcher) -> None:
        """Forget a watcher (its HTTP stream ended)."""
        with self.lock:
            self.collections[watcher.rt.key].watchers.discard(watcher)

    def compact(self, rt: ResourceType | None = None) -> None:
        """Expire history now: older versions and continue tokens then answer 410."""
        with self.lock:
            # Bump the revision so that a fresh list returns a version that is still valid.
            self.rv += 1
            cols = [self.collections[rt.key]] if rt else list(self.collections.values())
            for col in cols:
                col.history.clear()
                col.floor = self.rv

    def close_watchers(self) -> None:
        """End every open watch stream (server shutdown)."""
        with self.lock:
            for col in self.collections.values():
                for watcher in list(col.watchers):
                    watcher.close()


def require(condition: bool, error: ApiError) -> None:
    """Raise ``error`` unless ``condition`` holds (keeps handler code flat)."""
    if not condition:
        raise error
