"""The inventory as scheduling reads it: the one door of scheduling to ``clusters``.

Scheduling sits below clusters (the rooms run one way: the layers contract in
``pyproject.toml``), yet it counts free GPUs on the clusters' nodes: the cycle's snapshot, the
submit preview, the drain impact, the what-if preview and the platform admins' edits query
clusters and nodes. Every module of scheduling imports them from here, so the contract lists
one upward import, this module's, and forbids any other: every read of the inventory from
below goes through this one reviewed place. ``clusters.models`` imports nothing of scheduling
(the inventory's own contract), so reading it never closes a cycle.
"""

from __future__ import annotations

from clusters.models import Cluster, ClusterState, Node

__all__ = ["Cluster", "ClusterState", "Node"]
