"""A team's Volcano Queue, and the Command that opens or closes it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from rules.volcano.names import (
    COMMAND_API_VERSION,
    COMMAND_KIND,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    QUEUE_API_VERSION,
    QUEUE_KIND,
    _fail,
    _is_dns_label,
    _is_dns_subdomain,
    _is_qualified_key,
)

# --- Queues -----------------------------------------------------------------------------------

QueueAction = Literal["OpenQueue", "CloseQueue"]


def build_volcano_queue(
    name: str,
    weight: int,
    capability: Mapping[str, str | int],
    *,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A team's cluster-scoped Volcano Queue, for server-side apply.

    ``weight`` is the team's fair-share weight (1..65535, Volcano's proportion plugin);
    ``capability`` its hard limit, e.g. ``{"nvidia.com/gpu": 8}`` (quota plus borrowing).
    ``reclaimable`` is set so other teams may take back what this team borrowed.
    State is not part of the object: see :func:`build_queue_command`.
    """
    if not _is_dns_subdomain(name) or name in ("root", "default"):
        raise _fail("queue name", f"must be a DNS-1123 subdomain other than root/default: {name!r}")
    if isinstance(weight, bool) or not 1 <= weight <= 65535:
        raise _fail("weight", f"must be between 1 and 65535, got {weight}")
    resources: dict[str, str | int] = {}
    for resource, amount in capability.items():
        if not _is_qualified_key(resource):
            raise _fail("capability", f"{resource!r} is not a resource name")
        if isinstance(amount, bool) or (isinstance(amount, int) and amount < 0):
            raise _fail("capability", f"{resource} must be a non-negative quantity, got {amount!r}")
        if isinstance(amount, str) and _QUANTITY.fullmatch(amount) is None:
            raise _fail("capability", f"{resource} must be a quantity, got {amount!r}")
        resources[resource] = amount
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY, **(labels or {})},
    }
    return {
        "apiVersion": QUEUE_API_VERSION,
        "kind": QUEUE_KIND,
        "metadata": metadata,
        "spec": {"weight": weight, "capability": resources, "reclaimable": True},
    }


# Non-negative quantities only (the CRD's pattern also admits a sign).
_QUANTITY = re.compile(
    r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?"
)


def build_queue_command(
    *, queue_name: str, queue_uid: str, action: QueueAction, namespace: str, name: str
) -> dict[str, Any]:
    """A ``bus.volcano.sh/v1alpha1`` Command that opens or closes a queue.

    Volcano's queue controller picks up Commands whose target is a Queue, applies the action
    to ``status.state`` and deletes the Command. ``queue_uid`` is the live queue's
    ``metadata.uid`` (an owner reference needs it); ``name`` should be unique per request,
    e.g. ``<queue>-close-<short random>``.
    """
    if action not in ("OpenQueue", "CloseQueue"):
        raise _fail("action", f"must be OpenQueue or CloseQueue, got {action!r}")
    if not _is_dns_subdomain(queue_name):
        raise _fail("queue_name", f"must be a DNS-1123 subdomain: {queue_name!r}")
    if not queue_uid:
        raise _fail("queue_uid", "must not be empty")
    if not _is_dns_label(namespace):
        raise _fail("namespace", f"must be a DNS-1123 label: {namespace!r}")
    if not _is_dns_subdomain(name):
        raise _fail("name", f"must be a DNS-1123 subdomain: {name!r}")
    return {
        "apiVersion": COMMAND_API_VERSION,
        "kind": COMMAND_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY},
        },
        "action": action,
        "target": {
            "apiVersion": QUEUE_API_VERSION,
            "kind": QUEUE_KIND,
            "name": queue_name,
            "uid": queue_uid,
        },
    }
