"""The kube adapter: the only package of the portal that imports ``kubernetes``.

One :class:`KubeClient` per cluster, built from credentials decrypted into memory: its own
``Configuration`` and ``ApiClient`` (never the client's global default configuration, never
``load_kube_config``), the CA passed as ``ca_cert_data`` (in memory, no file), the bearer token
as an API key. A client certificate and key can only be given to Python's ``ssl`` as a *path*,
so they are written to an anonymous in-memory file (``os.memfd_create``) that lives exactly as
long as the client and is never on disk; where memfd does not exist (not Linux) client
certificates are refused with a message saying to use a token.

Every call has a timeout (connect, read), goes through the cluster's rate limiter, and returns
plain dicts (the JSON the API server sent, not the client's model classes, so Volcano objects
and core objects look alike and cost no deserialization). Every failure becomes a
:class:`KubeError` that says in words what went wrong and whether trying again may help; its
message never contains a credential. urllib3's own retries are off: the callers decide what is
worth retrying (dispatch backs off with jitter, the watch relists, the reconcile runs again).

Watches are read line by line from the raw response (``watch=true``) instead of through
``kubernetes.watch.Watch``, which builds a default-configured ``ApiClient`` of its own and
hides 410 Gone behind a silent retry; here a 410 is an event the caller relists on.

The package, one module per part: ``client`` (the client and the one path every call takes),
``connection`` (how to reach a cluster), ``errors`` (every failure in words), ``names`` (the
groups and plurals, as RBAC spells them), and the calls by API family: ``core``, ``volcano_api``,
``serving``, ``probes`` (the connection test's) and ``watch``. Callers import from
``clusters.kube`` itself: the names below are the adapter's surface.
"""

from kubernetes.utils import parse_quantity

from clusters.kube.client import KubeClient
from clusters.kube.connection import Connection, RateLimiter
from clusters.kube.errors import TRANSIENT_STATUSES, KubeError
from clusters.kube.names import (
    FIELD_MANAGER,
    JOB_GROUP,
    JOB_PLURAL,
    JOB_VERSION,
    PROBE_NAME,
    RBAC_INGRESSES,
    RBAC_JOBS,
    RBAC_PODGROUPS,
    RBAC_QUEUES,
)
from clusters.kube.serving import ProxyAnswer
from clusters.kube.watch import WatchEvent

__all__ = [
    "FIELD_MANAGER",
    "JOB_GROUP",
    "JOB_PLURAL",
    "JOB_VERSION",
    "PROBE_NAME",
    "RBAC_INGRESSES",
    "RBAC_JOBS",
    "RBAC_PODGROUPS",
    "RBAC_QUEUES",
    "TRANSIENT_STATUSES",
    "Connection",
    "KubeClient",
    "KubeError",
    "ProxyAnswer",
    "RateLimiter",
    "WatchEvent",
    "parse_quantity",
]
