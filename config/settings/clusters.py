"""The clusters app: credentials at rest, URL checks, per-cluster request budgets, sync
intervals, deadlines, and its periodic tasks."""

from __future__ import annotations

import base64
import binascii
import hashlib

from django.core.exceptions import ImproperlyConfigured

from config.settings.celery import CELERY_BEAT_SCHEDULE
from config.settings.core import DEBUG, SECRET_KEY
from config.settings.environment import env, env_bool, env_int, env_secret


# ---------------------------------------------------------------------------------------------
# clusters: credentials at rest, URL checks, per-cluster request budgets, sync intervals
# ---------------------------------------------------------------------------------------------
def _cluster_secret_keys() -> list[str]:
    """Fernet keys for cluster credentials, newest first (comma-separated, or from a file).

    In DEBUG a key is derived from SECRET_KEY so ``make demo`` needs no setup; in production a
    missing key is a start-up error, never a silently generated one (a restart would then
    leave every stored credential unreadable).
    """
    raw = env_secret("GPUPOOL_SECRET_KEYS") or ""
    keys = [k.strip() for k in raw.split(",") if k.strip()]
    if not keys:
        if not DEBUG:
            raise ImproperlyConfigured(
                "GPUPOOL_SECRET_KEYS (or GPUPOOL_SECRET_KEYS_FILE) must be set when DEBUG=false: "
                "comma-separated Fernet keys, the current key first"
            )
        digest = hashlib.sha256(b"gpupool-cluster-credentials:" + SECRET_KEY.encode()).digest()
        return [base64.urlsafe_b64encode(digest).decode()]
    for index, key in enumerate(keys):
        try:
            ok = len(base64.urlsafe_b64decode(key.encode())) == 32
        except (ValueError, binascii.Error):
            ok = False
        if not ok:
            raise ImproperlyConfigured(
                f"GPUPOOL_SECRET_KEYS: key {index + 1} is not a Fernet key (32 url-safe base64 "
                "bytes; make one with: python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())')"
            )
    return keys


GPUPOOL_SECRET_KEYS = _cluster_secret_keys()
# kubesim in the demo and the tests listens on 127.0.0.1; production clusters never do.
GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS = env_bool("GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS", DEBUG)
GPUPOOL_ALLOW_PRIVATE_CLUSTER_URLS = env_bool("GPUPOOL_ALLOW_PRIVATE_CLUSTER_URLS", True)
# Defaults for clusters that do not set their own (sized for one Volcano controller).
GPUPOOL_CLUSTER_REQUEST_RATE = env_int("GPUPOOL_CLUSTER_REQUEST_RATE", 50, minimum=1)
GPUPOOL_CLUSTER_CREATES_IN_FLIGHT = env_int("GPUPOOL_CLUSTER_CREATES_IN_FLIGHT", 16, minimum=1)
# Where a pod finds its service account (token, ca.crt): clusters registered --in-cluster.
GPUPOOL_SERVICE_ACCOUNT_DIR = env.str(
    "GPUPOOL_SERVICE_ACCOUNT_DIR", default="/var/run/secrets/kubernetes.io/serviceaccount"
)
GPUPOOL_CLUSTER_TIMEOUT_SECONDS = env_int("GPUPOOL_CLUSTER_TIMEOUT_SECONDS", 10, minimum=1)
# Tasks one worker runs for one cluster at once (0: half the worker's slots), so a cluster
# that hangs never holds every slot: cycles and the other clusters keep the rest.
GPUPOOL_CLUSTER_TASK_SLOTS = env_int("GPUPOOL_CLUSTER_TASK_SLOTS", 0)
GPUPOOL_DISPATCH_MAX_ATTEMPTS = env_int("GPUPOOL_DISPATCH_MAX_ATTEMPTS", 8, minimum=1)
# First retry after about this long, doubling per attempt (with jitter), at most a minute.
GPUPOOL_DISPATCH_BACKOFF_MS = env_int("GPUPOOL_DISPATCH_BACKOFF_MS", 1000, minimum=1)
GPUPOOL_INVENTORY_INTERVAL = env_int("GPUPOOL_INVENTORY_INTERVAL", 60, minimum=1)
# How long a new GPU node may take to bring its GPUs up before the doctor calls it broken.
GPUPOOL_DOCTOR_NODE_GRACE_SECONDS = env_int("GPUPOOL_DOCTOR_NODE_GRACE_SECONDS", 600)
GPUPOOL_RECONCILE_INTERVAL = env_int("GPUPOOL_RECONCILE_INTERVAL", 30, minimum=1)
# A cluster unreachable this long gives back the jobs admitted to it whose Volcano Job was
# certainly never created there: requeued, they run elsewhere (clusters.status).
GPUPOOL_UNREACHABLE_REQUEUE_MINUTES = env_int("GPUPOOL_UNREACHABLE_REQUEUE_MINUTES", 10, minimum=1)
GPUPOOL_QUEUE_SYNC_INTERVAL = env_int("GPUPOOL_QUEUE_SYNC_INTERVAL", 300, minimum=1)
# Lost hand-offs (a worker killed mid-dispatch, messages gone with a Redis restart) are sent
# again this often; the reconcile above is the backstop (clusters/redrive.py).
GPUPOOL_REDRIVE_INTERVAL = env_int("GPUPOOL_REDRIVE_INTERVAL", 2, minimum=1)
# No job holds GPUs past its bound (clusters/deadlines.py): a RUNNING job is stopped this long
# after its max runtime; pods that cannot pull their image or build their container fail the
# job after START_FAILURE; a gang with no replica on a node is requeued after UNSCHEDULABLE,
# at most UNSCHEDULABLE_REQUEUES times, then fails.
GPUPOOL_DEADLINES_INTERVAL = env_int("GPUPOOL_DEADLINES_INTERVAL", 15, minimum=1)
GPUPOOL_MAX_RUNTIME_GRACE_SECONDS = env_int("GPUPOOL_MAX_RUNTIME_GRACE_SECONDS", 120)
GPUPOOL_START_FAILURE_SECONDS = env_int("GPUPOOL_START_FAILURE_SECONDS", 300, minimum=1)
GPUPOOL_UNSCHEDULABLE_SECONDS = env_int("GPUPOOL_UNSCHEDULABLE_SECONDS", 600, minimum=1)
GPUPOOL_UNSCHEDULABLE_REQUEUES = env_int("GPUPOOL_UNSCHEDULABLE_REQUEUES", 2)
# Give the clusters app's tasks a queue of their own (dedicated dispatch workers in
# production; one queue per test session, so a test's worker never sees another's tasks).
GPUPOOL_CLUSTERS_QUEUE = env.str("GPUPOOL_CLUSTERS_QUEUE", default="")
if GPUPOOL_CLUSTERS_QUEUE:
    CELERY_TASK_ROUTES = {"clusters.*": {"queue": GPUPOOL_CLUSTERS_QUEUE}}
CELERY_BEAT_SCHEDULE.update(
    {
        "clusters-sync-inventory": {
            "task": "clusters.sync_all_inventories",
            "schedule": GPUPOOL_INVENTORY_INTERVAL,
        },
        "clusters-reconcile": {
            "task": "clusters.reconcile_all_clusters",
            "schedule": GPUPOOL_RECONCILE_INTERVAL,
        },
        "clusters-sync-queues": {
            "task": "clusters.sync_all_queues",
            "schedule": GPUPOOL_QUEUE_SYNC_INTERVAL,
        },
        "clusters-redrive": {
            "task": "clusters.redrive",
            "schedule": float(GPUPOOL_REDRIVE_INTERVAL),
            "options": {"expires": float(GPUPOOL_REDRIVE_INTERVAL)},
        },
        "clusters-deadlines": {
            "task": "clusters.enforce_deadlines",
            "schedule": GPUPOOL_DEADLINES_INTERVAL,
            "options": {"expires": float(GPUPOOL_DEADLINES_INTERVAL)},
        },
    }
)
