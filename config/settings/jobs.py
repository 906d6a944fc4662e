"""The portal's jobs: what one request may ask for, API tokens, submit rates and limits."""

from __future__ import annotations

from config.settings.core import DEBUG
from config.settings.environment import BASE_DIR, env, env_bool, env_int

# ---------------------------------------------------------------------------------------------
# gpupool
# ---------------------------------------------------------------------------------------------
# Upper bound on GPUs one replica may ask for until clusters report their largest node.
GPUPOOL_MAX_GPUS_PER_REPLICA = env_int("GPUPOOL_MAX_GPUS_PER_REPLICA", 8, minimum=1)
GPUPOOL_MAX_REPLICAS = env_int("GPUPOOL_MAX_REPLICAS", 512, minimum=1)
# Upper bound on a job's retry budget (Volcano maxRetry: gang restarts after evictions).
GPUPOOL_MAX_RETRY = env_int("GPUPOOL_MAX_RETRY", 10)
GPUPOOL_API_TOKEN_DAYS = env_int("GPUPOOL_API_TOKEN_DAYS", 90, minimum=1)
# Seconds a process remembers a token that authenticated (no look-up query on the next
# requests); a revocation in another process applies within them. 0: look up every request.
GPUPOOL_API_TOKEN_CACHE_SECONDS = env_int("GPUPOOL_API_TOKEN_CACHE_SECONDS", 5)
# Per-user submit rate (DRF rate syntax), counted in the default cache.
GPUPOOL_SUBMIT_RATE = env.str("SUBMIT_THROTTLE_RATE", default="600/min")
GPUPOOL_BATCH_MAX = env_int("GPUPOOL_BATCH_MAX", 1000, minimum=1)
# Queued (still waiting) jobs a submit may leave in one team, and of one member in one team,
# for a team whose policy leaves ``max_queued_jobs`` / ``max_queued_jobs_per_user`` empty; a
# policy's own value wins. Beyond them a submit is a 429 naming the limit. 0: no default limit.
GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM = env_int("GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM", 5000)
GPUPOOL_MAX_QUEUED_JOBS_PER_USER = env_int("GPUPOOL_MAX_QUEUED_JOBS_PER_USER", 1000)
# The largest request body read (Django's own limit, 2.5 MiB by default): a larger one is a 413
# naming the limit. A 1,000-job batch of ordinary jobs takes about 0.5 MiB.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("GPUPOOL_MAX_REQUEST_BYTES", 2_621_440, minimum=1024)
GPUPOOL_GPU_CATALOG_CSV = env.str(
    "GPUPOOL_GPU_CATALOG_CSV",
    default=str(BASE_DIR / "scheduling" / "data" / "gpu-models.csv"),
)
# Bench-only endpoints (a bare INSERT to compare submit throughput against); never in production.
GPUPOOL_BENCH_ENDPOINTS = env_bool("GPUPOOL_BENCH_ENDPOINTS", False)
# Demo mode (set by ``manage.py run_demo``): the login page names the demo users and their
# password. Only with DEBUG, so a production portal never shows it.
GPUPOOL_DEMO = DEBUG and env_bool("GPUPOOL_DEMO", False)
