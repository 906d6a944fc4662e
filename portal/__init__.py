"""gpupool's user-facing app: jobs, their API and pages, API tokens, the shared plumbing (logs,
health, outages). The project shell (settings, root URLs, Celery app, WSGI) is ``config/``."""
