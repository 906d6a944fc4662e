"""The scheduler: cycle interval and bounds, fairness, preemption, start estimates, and its
periodic tasks."""

from __future__ import annotations

from config.settings.celery import CELERY_BEAT_SCHEDULE
from config.settings.environment import env_bool, env_int

# ---------------------------------------------------------------------------------------------
# Scheduling
# ---------------------------------------------------------------------------------------------
GPUPOOL_SCHEDULER_INTERVAL_SECONDS = env_int("GPUPOOL_SCHEDULER_INTERVAL_SECONDS", 5, minimum=1)
GPUPOOL_SCHEDULER_LOOKBACK = env_int("GPUPOOL_SCHEDULER_LOOKBACK", 1000, minimum=1)
# Triggered cycles (submit, finish, cancel) start at most this often: under a stream of submits
# back-to-back cycles would each reload every running job for a handful of new ones.
GPUPOOL_SCHEDULER_MIN_GAP_MS = env_int("GPUPOOL_SCHEDULER_MIN_GAP_MS", 300)
GPUPOOL_STARVATION_WAIT_MINUTES = env_int("GPUPOOL_STARVATION_WAIT_MINUTES", 120, minimum=1)
GPUPOOL_USAGE_HALF_LIFE_HOURS = env_int("GPUPOOL_USAGE_HALF_LIFE_HOURS", 7 * 24, minimum=1)
GPUPOOL_PREEMPTION = env_bool("GPUPOOL_PREEMPTION", True)
# Preemption people can live with (docs/scheduling.md): the defaults of teams whose policy
# names none, and the pool's budget of GPUs preempted per cycle (0 = no budget).
GPUPOOL_PREEMPTION_MIN_RUNTIME_MINUTES = env_int("GPUPOOL_PREEMPTION_MIN_RUNTIME_MINUTES", 0)
GPUPOOL_TERMINATION_GRACE_SECONDS = env_int("GPUPOOL_TERMINATION_GRACE_SECONDS", 30)
GPUPOOL_PREEMPTION_BUDGET_GPUS = env_int("GPUPOOL_PREEMPTION_BUDGET_GPUS", 0)
# Start estimates (scheduling.estimates): each cycle simulates the queue forward this far and
# for at most this many engine decisions; finished runs of the last days teach the runtimes.
GPUPOOL_ESTIMATE_HORIZON_HOURS = env_int("GPUPOOL_ESTIMATE_HORIZON_HOURS", 7 * 24, minimum=1)
GPUPOOL_ESTIMATE_MAX_STEPS = env_int("GPUPOOL_ESTIMATE_MAX_STEPS", 200, minimum=1)
GPUPOOL_ESTIMATE_HISTORY_DAYS = env_int("GPUPOOL_ESTIMATE_HISTORY_DAYS", 30, minimum=1)
CELERY_BEAT_SCHEDULE.update(
    {
        "scheduling-cycle": {
            "task": "scheduling.run_cycle",
            "schedule": float(GPUPOOL_SCHEDULER_INTERVAL_SECONDS),
            "options": {"expires": float(GPUPOOL_SCHEDULER_INTERVAL_SECONDS)},
        },
        "scheduling-usage": {"task": "scheduling.account_usage", "schedule": 60.0},
    }
)
