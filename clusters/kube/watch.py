"""Watches, read line by line from the raw response instead of through
``kubernetes.watch.Watch`` (which builds a default-configured ``ApiClient`` of its own and
hides 410 Gone behind a silent retry): here a 410 is a :class:`KubeError` the caller relists on.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from clusters.kube.errors import KubeError, _api_error, _transport_error
from clusters.kube.names import JOB_GROUP, JOB_PLURAL, JOB_VERSION


@dataclass(frozen=True)
class WatchEvent:
    """One line of a watch: ADDED, MODIFIED, DELETED or BOOKMARK, with the object as a dict."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


class WatchMixin:
    """Mixed into :class:`clusters.kube.client.KubeClient`, whose ``__init__`` builds the API
    objects these calls use."""

    def watch(
        self,
        resource: str,
        *,
        label_selector: str,
        resource_version: str,
        timeout_seconds: int = 300,
        stop: threading.Event | None = None,
    ) -> Iterator[WatchEvent]:
        """Events after ``resource_version`` (``jobs`` or ``pods``, all namespaces; ``nodes``).

        Ends when the server closes the stream (``timeout_seconds``) or ``stop`` is set.
        Raises :class:`KubeError` with ``gone`` for 410 (the version is too old: relist). An
        empty ``label_selector`` follows every object (nodes carry no portal label).
        """
        kwargs: dict[str, Any] = {
            "watch": True,
            "allow_watch_bookmarks": True,
            "timeout_seconds": timeout_seconds,
        }
        if label_selector:
            kwargs["label_selector"] = label_selector
        if resource_version:
            kwargs["resource_version"] = resource_version
        if resource == "jobs":
            fn: Any = self.custom.list_cluster_custom_object
            args: tuple[Any, ...] = (JOB_GROUP, JOB_VERSION, JOB_PLURAL)
        elif resource == "pods":
            fn, args = self.core.list_pod_for_all_namespaces, ()
        elif resource == "nodes":
            fn, args = self.core.list_node, ()
        else:
            raise ValueError(f"cannot watch {resource!r}")
        what = f"watching {resource}"
        self.limiter.acquire()
        try:
            resp = fn(
                *args,
                _preload_content=False,
                _request_timeout=(self.timeout[0], timeout_seconds + self.timeout[1]),
                **kwargs,
            )
        except ApiException as exc:
            raise _api_error(exc, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _transport_error(exc, what) from None
        with self._streams_lock:
            self._streams.add(resp)
        try:
            for line in iter_resp_lines(resp):
                if stop is not None and stop.is_set():
                    return
                if not line or line.isspace():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    code = int(obj.get("code") or 0)
                    raise KubeError(
                        f"{what}: {code} {obj.get('reason', '')}: {obj.get('message', '')}",
                        status=code or None,
                        reason=str(obj.get("reason") or ""),
                    )
                yield WatchEvent(str(kind), obj)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if stop is not None and stop.is_set():
                return
            raise _transport_error(exc, what) from None
        finally:
            with self._streams_lock:
                self._streams.discard(resp)
            with contextlib.suppress(Exception):
                resp.close()
                resp.release_conn()

    def abort_streams(self) -> None:
        """End every open watch of this client now (a blocked read returns), for shutdown."""
        with self._streams_lock:
            streams = list(self._streams)
        for resp in streams:
            with contextlib.suppress(Exception):
                resp.shutdown()
