"""Settings for gpupool, read from the environment through one ``environ.Env``.

Embedded defaults (SQLite, kombu's filesystem broker, a local-memory cache) make ``make demo``
run on a machine with neither PostgreSQL nor Redis. Production sets ``DEBUG=false`` plus the
URLs of its services; then a missing ``SECRET_KEY`` is a loud failure, not a silent default.
Every variable is listed in docs/settings.md. Per-team policy (quotas, weights) lives in the
database.

One part per concern, read in this order: a later part may add to what an earlier one set
(``INSTALLED_APPS``, ``MIDDLEWARE``, ``CELERY_BEAT_SCHEDULE``, ``AUTHENTICATION_BACKENDS``) by
importing it from there, so the order below is the order of those lists.
"""

# The order matters (see above): not sorted.
# isort: off
from config.settings.environment import *  # noqa: F403
from config.settings.core import *  # noqa: F403
from config.settings.database import *  # noqa: F403
from config.settings.cache import *  # noqa: F403
from config.settings.api import *  # noqa: F403
from config.settings.celery import *  # noqa: F403
from config.settings.jobs import *  # noqa: F403
from config.settings.clusters import *  # noqa: F403
from config.settings.logging import *  # noqa: F403
from config.settings.scheduling import *  # noqa: F403
from config.settings.dashboards import *  # noqa: F403
from config.settings.notifications import *  # noqa: F403
from config.settings.security import *  # noqa: F403
from config.settings.identity import *  # noqa: F403
# isort: on
