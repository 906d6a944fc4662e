"""Server-side tables: what ``kubectl get`` prints, computed the way the apiserver does.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the
``meta.k8s.io/v1`` Table it gets back; columns with ``priority > 0`` appear only with
``-o wide``. The columns and cells follow the apiserver's printers
(``pkg/printers/internalversion``) for the built-in kinds and the CRD's
``additionalPrinterColumns`` for custom ones (Volcano's Job: STATUS, minAvailable, RUNNINGS,
AGE, QUEUE). Ages are rendered here with apimachinery's ``HumanDuration`` against the wall
clock, which is what metadata timestamps follow.

Pure functions over stored objects: no store, no locks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from kubesim.store import ResourceType

TABLE_MEDIA = "application/json;as=Table;v=v1;g=meta.k8s.io"

_NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC."
)


def wants_table(accept: str | None) -> bool:
    """Whether the Accept header asks for a meta.k8s.io Table (v1 or v1beta1)."""
    if not accept:
        return False
    for part in accept.split(","):
        params = {
            p.strip().split("=", 1)[0]: p.strip().partition("=")[2] for p in part.split(";")[1:]
        }
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return True
    return False


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``: ``45s``, ``5m10s``, ``3h``, ``2d4h``..."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y" if rest == 0 else f"{years}y{rest}d"
    return f"{hours // 24 // 365}y"


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def age(stamp: Any, now: float) -> str:
    """How long ago ``stamp`` (RFC 3339) was, or ``<unknown>``."""
    at = _epoch(stamp)
    return "<unknown>" if at is None else human_duration(now - at)


def _col(name: str, description: str = "", *, priority: int = 0, kind: str = "string") -> dict:
    column: dict[str, Any] = {
        "name": name,
        "type": kind,
        "format": "name" if name == "Name" else "",
        "description": description,
        "priority": priority,
    }
    return column


def _none(value: Any) -> str:
    return str(value) if value not in (None, "", []) else "<none>"


# -- pods --------------------------------------------------------------------------------------

POD_COLUMNS = [
    _col("Name", _NAME_DOC),
    _col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", "The aggregate status of the containers in this pod."),
    _col("Restarts", "The number of times the containers in this pod have been restarted."),
    _col("Age", _AGE_DOC),
    _col(
        "IP", "IP address allocated to the pod. Routable at least within the cluster.", priority=1
    ),
    _col("Node", "NodeName is a request to schedule this pod onto a specific node.", priority=1),
    _col("Nominated Node", "nominatedNodeName is set when this pod preempts others.", priority=1),
    _col("Readiness Gates", "If specified, all readiness gates will be evaluated.", priority=1),
]


def pod_status(pod: dict[str, Any]) -> str:
    """The STATUS column: a waiting or terminated reason, Terminating, else the phase."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    running = False
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            terminated = state["terminated"] or {}
            if terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated.get("signal"):
                reason = f"Signal:{terminated['signal']}"
            else:
                reason = f"ExitCode:{terminated.get('exitCode', 0)}"
        elif "running" in state and container.get("ready"):
            running = True
    if reason == "Completed" and running:
        reason = "Running"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def pod_row(pod: dict[str, Any], now: float) -> list[Any]:
    """Cells of :data:`POD_COLUMNS` for one pod."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    total = len(spec.get("containers") or []) or len(containers)
    ready = sum(1 for c in containers if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in containers)
    gates = spec.get("readinessGates") or []
    if gates:
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        passed = sum(1 for g in gates if conditions.get(g.get("conditionType")) == "True")
        gates_text = f"{passed}/{len(gates)}"
    else:
        gates_text = "<none>"
    return [
        pod["metadata"]["name"],
        f"{ready}/{total}",
        pod_status(pod),
        restarts,
        age(pod["metadata"].get("creationTimestamp"), now),
        _none(status.get("podIP")),
        _none(spec.get("nodeName")),
        _none(status.get("nominatedNodeName")),
        gates_text,
    ]


# -- nodes -------------------------------------------------------------------------------------

NODE_COLUMNS = [
    _col("Name", _NAME_DOC),
    _col("Status", "The status of the node"),
    _col("Roles", "The roles of the node"),
    _col("Age", _AGE_DOC),
    _col("Version", "Kubelet Version reported by the node."),
    _col("Internal-IP", "List of addresses reachable to the node.", priority=1),
    _col("External-IP", "List of addresses reachable to the node.", priority=1),
    _col("OS-Image", "OS Image reported by the node from /etc/os-release.", priority=1),
    _col("Kernel-Version", "Kernel Version reported by the node.", priority=1),
    _col("Container-Runtime", "Container runtime version reported by the node.", priority=1),
]


def node_row(node: dict[str, Any], now: float) -> list[Any]:
    """Cells of :data:`NODE_COLUMNS` for one node."""
    status = node.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    ready = conditions.get("Ready")
    text = "Ready" if ready == "True" else ("NotReady" if ready == "False" else "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(
        key.split("/", 1)[1]
        for key in labels
        if key.startswith("node-role.kubernetes.io/") and "/" in key
    )
    if labels.get("kubernetes.io/role"):
        roles.append(labels["kubernetes.io/role"])
    addresses = status.get("addresses") or []

    def address(kind: str) -> str:
        return next((a["address"] for a in addresses if a.get("type") == kind), "<none>")

    info = status.get("nodeInfo") or {}
    return [
        node["metadata"]["name"],
        text,
        ",".join(sorted(set(roles))) or "<none>",
        age(node["metadata"].get("creationTimestamp"), now),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        _none(info.get("osImage")),
        _none(info.get("kernelVersion")),
        _none(info.get("containerRuntimeVersion")),
    ]


# -- the other core kinds ----------------------------------------------------------------------

NAMESPACE_COLUMNS = [
    _col("Name", _NAME_DOC),
    _col("Status", "The status of the namespace"),
    _col("Age", _AGE_DOC),
]


def namespace_row(ns: dict[str, Any], now: float) -> list[Any]:
    """NAME STATUS AGE."""
    return [
        ns["metadata"]["name"],
        (ns.get("status") or {}).get("phase", ""),
        age(ns["metadata"].get("creationTimestamp"), now),
    ]


EVENT_COLUMNS = [
    _col("Last Seen", "The last time the event was seen"),
    _col("Type", "Type of this event (Normal, Warning), new types could be added in the future."),
    _col("Reason", "This should be a short, machine understandable string."),
    _col("Object", "The object this Event is about."),
    _col("Subobject", "The subobject this Event is about.", priority=1),
    _col("Source", "The component reporting this event.", priority=1),
    _col("Message", "A human-readable description of the status of this operation."),
    _col("First Seen", "The first time the event was seen", priority=1),
    _col("Count", "The number of times this event has occurred.", priority=1),
    _col("Name", _NAME_DOC, priority=1),
]


def event_row(event: dict[str, Any], now: float) -> list[Any]:
    """LAST SEEN TYPE REASON OBJECT MESSAGE (+ wide: SUBOBJECT SOURCE FIRST SEEN COUNT NAME)."""
    last = event.get("lastTimestamp") or event.get("eventTime")
    first = event.get("firstTimestamp") or event.get("eventTime")
    count = int(event.get("count") or 1)
    last_seen = age(last, now)
    if count > 1:
        last_seen = f"{last_seen} (x{count} over {age(first, now)})"
    involved = event.get("involvedObject") or {}
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    if source.get("host"):
        component = f"{component}, {source['host']}"
    return [
        last_seen,
        event.get("type", ""),
        event.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        component,
        str(event.get("message", "")).strip(),
        age(first, now),
        count,
        event["metadata"]["name"],
    ]


CONFIGMAP_COLUMNS = [
    _col("Name", _NAME_DOC),
    _col("Data", "Number of keys in the ConfigMap", kind="integer"),
    _col("Age", _AGE_DOC),
]


def configmap_row(cm: dict[str, Any], now: float) -> list[Any]:
    """NAME DATA AGE."""
    keys = len(cm.get("data") or {}) + len(cm.get("binaryData") or {})
    return [cm["metadata"]["name"], keys, age(cm["metadata"].get("creationTimestamp"), now)]


SECRET_COLUMNS = [
    _col("Name", _NAME_DOC),
    _col("Type", "The type of the secret"),
    _col("Data", "The number of keys in the secret", kind="integer"),
    _col("Age", _AGE_DOC),
]


def secret_row(secret: dict[str, Any], now: float) -> list[Any]:
    """NAME TYPE DATA AGE."""
    return [
        secret["metadata"]["name"],
        secret.get("type", "Opaque"),
        len(secret.get("data") or {}),
        age(secret["metadata"].get("creationTimestamp"), now),
    ]


SERVICE_COLUMNS = [
    _col("Name", _NAME_DOC),
    _col("Type", "The type of the service"),
    _col("Cluster-IP", "The cluster ip of the service"),
    _col("External-IP", "The external ip of the service"),
    _col("Port(s)", "The ports of the service"),
    _col("Age", _AGE_DOC),
    _col("Selector", "The selector of the service", priority=1),
]


def service_row(svc: dict[str, Any], now: float) -> list[Any]:
    """NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE (+ wide: SELECTOR)."""
    spec = svc.get("spec") or {}
    ports = []
    for port in spec.get("ports") or []:
        text = f"{port.get('port')}"
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        ports.append(f"{text}/{port.get('protocol', 'TCP')}")
    selector = spec.get("selector") or {}
    return [
        svc["metadata"]["name"],
        spec.get("type", "ClusterIP"),
        _none(spec.get("clusterIP")),
        ",".join(spec.get("externalIPs") or []) or "<none>",
        ",".join(ports) or "<none>",
        age(svc["metadata"].get("creationTimestamp"), now),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
    ]


INGRESS_COLUMNS = [
    _col("Name", _NAME_DOC),
    _col("Class", "The name of the IngressClass resource"),
    _col("Hosts", "Hosts that incoming requests are matched against"),
    _col("Address", "Address is a list containing ingress points for the load-balancer"),
    _col("Ports", "Ports of TLS configurations that open"),
    _col("Age", _AGE_DOC),
]


def ingress_row(ing: dict[str, Any], now: float) -> list[Any]:
    """NAME CLASS HOSTS ADDRESS PORTS AGE."""
    spec = ing.get("spec") or {}
    hosts = [r.get("host") for r in spec.get("rules") or [] if r.get("host")]
    lb = ((ing.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    addresses = [i.get("ip") or i.get("hostname") for i in lb]
    return [
        ing["metadata"]["name"],
        _none(spec.get("ingressClassName")),
        ",".join(hosts) or "*",
        ",".join(a for a in addresses if a),
        "80, 443" if spec.get("tls") else "80",
        age(ing["metadata"].get("creationTimestamp"), now),
    ]


BUILTIN: dict[str, tuple[list[dict[str, Any]], Callable[[dict[str, Any], float], list[Any]]]] = {
    "pods": (POD_COLUMNS, pod_row),
    "nodes": (NODE_COLUMNS, node_row),
    "namespaces": (NAMESPACE_COLUMNS, namespace_row),
    "events": (EVENT_COLUMNS, event_row),
    "configmaps": (CONFIGMAP_COLUMNS, configmap_row),
    "secrets": (SECRET_COLUMNS, secret_row),
    "services": (SERVICE_COLUMNS, service_row),
    "ingresses.networking.k8s.io": (INGRESS_COLUMNS, ingress_row),
}


# -- custom resources --------------------------------------------------------------------------


def _json_path(obj: Any, path: str) -> Any:
    """The simple ``.a.b.c`` JSONPaths CRD printer columns use."""
    value = obj
    for part in path.strip().lstrip(".").split("."):
        if not part:
            continue
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def crd_columns(rt: ResourceType) -> list[dict[str, Any]]:
    """Name plus the CRD's ``additionalPrinterColumns`` (or the default "Created At")."""
    version = rt.crd.document["spec"]["versions"][0]
    printer = version.get("additionalPrinterColumns")
    columns = [_col("Name", _NAME_DOC)]
    if not printer:
        return [*columns, _col("Created At", _AGE_DOC, kind="date")]
    for column in printer:
        columns.append(
            _col(
                column["name"],
                column.get("description", ""),
                priority=int(column.get("priority", 0)),
                kind=column.get("type", "string"),
            )
        )
    return columns


def crd_row(rt: ResourceType, obj: dict[str, Any], now: float) -> list[Any]:
    """Cells for the CRD's printer columns; dates render as ages, absent values as None."""
    version = rt.crd.document["spec"]["versions"][0]
    printer = version.get("additionalPrinterColumns")
    cells: list[Any] = [obj["metadata"]["name"]]
    if not printer:
        return [*cells, obj["metadata"].get("creationTimestamp")]
    for column in printer:
        value = _json_path(obj, column["jsonPath"])
        if column.get("type") == "date" and value is not None:
            value = age(value, now)
        elif isinstance(value, dict | list):
            value = str(value)
        cells.append(value)
    return cells


def _partial(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def columns_for(rt: ResourceType) -> list[dict[str, Any]]:
    """The column definitions of a served type."""
    if rt.crd is not None:
        return crd_columns(rt)
    return BUILTIN[rt.key][0]


def row_for(rt: ResourceType, obj: dict[str, Any], include: str, now: float) -> dict[str, Any]:
    """One Table row; ``include`` is ``includeObject`` (None, Metadata or Object)."""
    cells = crd_row(rt, obj, now) if rt.crd is not None else BUILTIN[rt.key][1](obj, now)
    row: dict[str, Any] = {"cells": cells}
    if include == "Object":
        row["object"] = obj
    elif include != "None":
        row["object"] = _partial(obj)
    return row


def table(
    rt: ResourceType,
    objects: list[dict[str, Any]],
    *,
    include: str = "Metadata",
    metadata: dict[str, Any] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objects``."""
    moment = time.time() if now is None else now
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata or {},
        "columnDefinitions": columns_for(rt),
        "rows": [row_for(rt, obj, include, moment) for obj in objects],
    }
