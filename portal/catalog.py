"""The catalog as the core reads it: the one door of the portal to ``scheduling``'s catalog.

The portal sits below scheduling (the rooms run one way: the layers contract in
``pyproject.toml``), yet submit checks a request against the GPU models and the team's policy,
the pages and the API list the models, access rules join the policies' table and the demo
seeds the catalog. Every module of the portal imports these names from here, so the contract
lists this module's upward imports and forbids any other: every read of the catalog from
below goes through this one reviewed place. ``scheduling.models`` and ``scheduling.catalog``
import nothing of the portal's services (the catalog's own contract), so reading them never
closes a cycle. The model classes are passed on as they are: their callers query them.
"""

from __future__ import annotations

from scheduling.catalog import catalog_entries, catalog_seed
from scheduling.models import GpuModel, TeamPolicy

__all__ = ["GpuModel", "TeamPolicy", "catalog_entries", "catalog_seed"]
