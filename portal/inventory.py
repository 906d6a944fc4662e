"""The inventory as the core reads it: the one door of the portal to what the clusters hold.

The portal sits below scheduling and clusters (the rooms run one way: the layers contract in
``pyproject.toml``), yet submit refuses more GPUs per replica than the largest node has
(``clusters.selectors``), and the submit page names the models no enabled cluster has now
(``scheduling.matching``, which counts them as the cycle does). The submit path imports them
from here, so the contract lists this module's upward imports and forbids any other: every
read of the inventory from below goes through this one reviewed place. It is apart from
``portal.catalog`` because ``clusters.selectors`` imports ``portal.access``, which reads the
catalog: one door for both would close a cycle.
"""

from __future__ import annotations

from clusters.selectors import largest_node_gpus
from scheduling.matching import models_unavailable

__all__ = ["largest_node_gpus", "models_unavailable"]
