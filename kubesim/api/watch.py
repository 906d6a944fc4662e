"""Watch streams: chunked JSON lines (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) from a
store watcher, filtered by selectors, with the injected drop/duplicate/gone faults.
"""

from __future__ import annotations

import queue as queue_mod
import time
from collections.abc import Callable
from typing import Any

from kubesim.api.wire import JSON, Request, Response, Route, StreamWriter, _json, _true
from kubesim.errors import ApiError, bad_request, gone
from kubesim.selectors import FieldSelector, LabelSelector
from kubesim.store import Entry, ResourceType, Watcher, WatchEvent
from kubesim.tables import row_for as table_row
from kubesim.tables import table as make_table
from kubesim.tables import wants_table

_IDLE: Any = object()


class WatchMixin:
    """Mixed into :class:`kubesim.api.core.Api`, whose ``__init__`` sets the state it reads."""

    def watch(self, req: Request, route: Route) -> Response:
        """A chunked stream of JSON lines: ADDED/MODIFIED/DELETED/BOOKMARK/ERROR."""
        rt = route.rt
        assert rt is not None
        label, fields = self._selectors(req, rt)
        rv_text = req.query.get("resourceVersion") or ""
        if rv_text in ("", "0"):
            since = None
        else:
            try:
                since = int(rv_text)
            except ValueError as exc:
                raise bad_request(f"invalid resource version {rv_text!r}") from exc
        timeout_text = req.query.get("timeoutSeconds")
        timeout = float(timeout_text) if timeout_text else 1800.0
        bookmarks = _true(req.query.get("allowWatchBookmarks"))
        forced_gone = self.faults.take(
            ("gone",), "watch", rt.plural, rt.group, None, route.namespace, None
        )
        interval = self.sim.settings.bookmark_interval_seconds
        render = None
        if wants_table(req.headers.get("accept")):
            include = req.query.get("includeObject") or "Metadata"
            columns_sent = [False]

            def render(entry: Entry) -> bytes:
                # kubectl -w: each event carries a one-row Table, the first one with columns
                body = make_table(rt, [], include=include)
                if columns_sent[0]:
                    body["columnDefinitions"] = []
                columns_sent[0] = True
                body["rows"] = [table_row(rt, entry.obj, include, time.time())]
                return _json(body)

        def error_line(err: ApiError) -> bytes:
            return b'{"type":"ERROR","object":' + _json(err.status()) + b"}\n"

        def stream(writer: StreamWriter) -> None:
            if forced_gone is not None:
                writer.send(
                    error_line(
                        gone(
                            f"too old resource version: {since or 0} ({self.store.rv}) "
                            "[kubesim injected fault]"
                        )
                    )
                )
                return
            try:
                watcher, initial, _start = self.store.watch(rt, route.namespace, since)
            except ApiError as err:
                writer.send(error_line(err))
                return
            try:
                self._pump(
                    writer, watcher, initial, label, fields, timeout, bookmarks, interval, render
                )
            finally:
                self.store.unwatch(watcher)

        return Response(200, b"", JSON, stream=stream)

    def _view(
        self, event: WatchEvent, label: LabelSelector, fields: FieldSelector, rt: ResourceType
    ) -> tuple[str, Entry] | None:
        if label.empty and fields.empty:
            return event.type, event.entry

        def ok(entry: Entry | None) -> bool:
            if entry is None:
                return False
            obj = entry.obj
            return label.matches(obj.get("metadata", {}).get("labels")) and (
                fields.empty or fields.matches(obj, rt.fields)
            )

        new_ok = ok(event.entry)
        if event.type == "ADDED":
            return ("ADDED", event.entry) if new_ok else None
        old_ok = ok(event.old)
        if event.type == "DELETED":
            return ("DELETED", event.entry) if (old_ok or new_ok) else None
        if new_ok and old_ok:
            return "MODIFIED", event.entry
        if new_ok:
            return "ADDED", event.entry
        if old_ok:
            return "DELETED", event.entry
        return None

    def _pump(
        self,
        writer: StreamWriter,
        watcher: Watcher,
        initial: list[WatchEvent],
        label: LabelSelector,
        fields: FieldSelector,
        timeout: float,
        bookmarks: bool,
        interval: float,
        render: Callable[[Entry], bytes] | None = None,
    ) -> None:
        rt = watcher.rt
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + interval
        bookmark_head = _json({"kind": rt.kind, "apiVersion": rt.api_version})[:-1]

        def encode(events: list[WatchEvent]) -> bytes:
            out = []
            for event in events:
                view = self._view(event, label, fields, rt)
                if view is None:
                    continue
                fault = self.faults.take(
                    ("drop", "duplicate"),
                    "watch",
                    rt.plural,
                    rt.group,
                    None,
                    event.entry.obj["metadata"].get("namespace"),
                    event.entry.obj["metadata"].get("name"),
                )
                if fault is not None and fault.kind == "drop":
                    continue
                raw = view[1].raw if render is None else render(view[1])
                line = b'{"type":"' + view[0].encode() + b'","object":' + raw + b"}\n"
                out.append(line)
                if fault is not None:
                    out.append(line)
            return b"".join(out)

        if initial:
            chunk = encode(initial)
            if chunk:
                writer.send(chunk)
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            wait = min(deadline - now, 0.25, max(next_bookmark - now, 0.0) if bookmarks else 0.25)
            try:
                event = watcher.queue.get(timeout=max(wait, 0.001))
            except queue_mod.Empty:
                event = _IDLE
            if event is None or watcher.closed:
                break
            if writer.gone():
                break
            if event is not _IDLE:
                batch = [event]
                while len(batch) < 1000:
                    try:
                        more = watcher.queue.get_nowait()
                    except queue_mod.Empty:
                        break
                    if more is None:
                        break
                    batch.append(more)
                chunk = encode(batch)
                if chunk:
                    writer.send(chunk)
            if bookmarks and time.monotonic() >= next_bookmark:
                next_bookmark = time.monotonic() + interval
                with self.store.lock:
                    caught_up = watcher.queue.empty()
                    rv = self.store.rv
                if caught_up:
                    writer.send(
                        b'{"type":"BOOKMARK","object":'
                        + bookmark_head
                        + b',"metadata":{"resourceVersion":"'
                        + str(rv).encode()
                        + b'"}}}\n'
                    )
