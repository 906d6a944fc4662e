"""The resource types kubesim serves: core v1 (nodes, namespaces, pods, events, secrets,
configmaps, services), ``networking.k8s.io/v1`` Ingresses, the three Volcano CRDs and Volcano
Commands.

Each :class:`~kubesim.store.ResourceType` lists its verbs (anything else is 405), its
subresources and the fields a ``fieldSelector`` may use, exactly as discovery advertises them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubesim.commands import command_crd
from kubesim.schema import CRD, load_crds
from kubesim.store import ResourceType


def path_getter(path: str) -> Callable[[dict[str, Any]], str]:
    """A field-selector getter for a dotted path; booleans render as ``true``/``false``."""
    parts = path.split(".")
    if len(parts) == 2:
        first, second = parts

        def get_two(obj: dict[str, Any]) -> str:
            value = (obj.get(first) or {}).get(second)
            if value is None:
                return ""
            if value is True or value is False:
                return "true" if value else "false"
            return value if isinstance(value, str) else str(value)

        return get_two

    def get(obj: dict[str, Any]) -> str:
        value: Any = obj
        for part in parts:
            if not isinstance(value, dict):
                return ""
            value = value.get(part)
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return get


def _fields(*paths: str) -> dict[str, Callable[[dict[str, Any]], str]]:
    return {p: path_getter(p) for p in ("metadata.name", "metadata.namespace", *paths)}


READ = frozenset({"get", "list", "watch"})
WRITE = frozenset({"create", "update", "patch", "delete", "deletecollection"})


class Types:
    """Every served type, by attribute and by (group, plural)."""

    def __init__(self, crds: dict[str, CRD] | None = None) -> None:
        crds = crds or load_crds()
        self.nodes = ResourceType(
            "",
            "v1",
            "nodes",
            "node",
            "Node",
            False,
            READ | {"patch", "update"},
            ("no",),
            ("status",),
            _fields("spec.unschedulable"),
        )
        self.namespaces = ResourceType(
            "",
            "v1",
            "namespaces",
            "namespace",
            "Namespace",
            False,
            READ | {"create", "update", "patch", "delete"},
            ("ns",),
            ("status",),
            _fields("status.phase"),
            name_rule="label",
        )
        self.pods = ResourceType(
            "",
            "v1",
            "pods",
            "pod",
            "Pod",
            True,
            READ | {"update", "patch", "delete", "deletecollection"},
            ("po",),
            ("status", "log"),
            _fields(
                "spec.nodeName",
                "status.phase",
                "spec.schedulerName",
                "spec.restartPolicy",
                "spec.serviceAccountName",
                "status.podIP",
                "status.nominatedNodeName",
            ),
            indexed_fields=("spec.nodeName",),
        )
        self.events = ResourceType(
            "",
            "v1",
            "events",
            "event",
            "Event",
            True,
            READ | {"create", "delete", "deletecollection"},
            ("ev",),
            (),
            _fields(
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ),
        )
        self.secrets = ResourceType(
            "",
            "v1",
            "secrets",
            "secret",
            "Secret",
            True,
            READ | {"create", "delete", "deletecollection"},
            (),
            (),
            _fields("type"),
        )
        self.configmaps = ResourceType(
            "",
            "v1",
            "configmaps",
            "configmap",
            "ConfigMap",
            True,
            READ | WRITE,
            ("cm",),
            (),
            _fields(),
        )
        self.services = ResourceType(
            "",
            "v1",
            "services",
            "service",
            "Service",
            True,
            READ | {"create", "delete"},
            ("svc",),
            ("status",),
            _fields("spec.clusterIP", "spec.type"),
        )
        self.ingresses = ResourceType(
            "networking.k8s.io",
            "v1",
            "ingresses",
            "ingress",
            "Ingress",
            True,
            READ | {"create", "delete", "deletecollection"},
            ("ing",),
            ("status",),
            _fields(),
        )
        self.jobs = self._crd(crds["jobs"], READ | WRITE)
        self.queues = self._crd(crds["queues"], READ | WRITE)
        self.podgroups = self._crd(crds["podgroups"], READ)
        self.commands = self._crd(command_crd(), READ | WRITE)
        self.all = [
            self.nodes,
            self.namespaces,
            self.pods,
            self.events,
            self.secrets,
            self.configmaps,
            self.services,
            self.ingresses,
            self.jobs,
            self.queues,
            self.podgroups,
            self.commands,
        ]
        self._by_path = {(rt.group, rt.plural): rt for rt in self.all}

    @staticmethod
    def _crd(crd: CRD, verbs: frozenset[str]) -> ResourceType:
        return ResourceType(
            crd.group,
            crd.version,
            crd.plural,
            crd.singular,
            crd.kind,
            crd.namespaced,
            verbs,
            tuple(crd.short_names),
            ("status",) if crd.status_subresource else (),
            _fields(),
            crd=crd,
        )

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at ``/apis/{group}/{version}/{plural}`` (or ``/api/v1``)."""
        rt = self._by_path.get((group, plural))
        if rt is None or rt.version != version:
            return None
        return rt

    def groups(self) -> dict[str, list[ResourceType]]:
        """Types per API group (``""`` is the core group)."""
        out: dict[str, list[ResourceType]] = {}
        for rt in self.all:
            out.setdefault(rt.group, []).append(rt)
        return out
