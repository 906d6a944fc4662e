"""gpupool's Django project and its user-facing app.

The Celery app is imported here so that ``@shared_task`` binds to it whenever Django starts.
"""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
