"""The Django project shell: settings (``config.settings``, one part per concern), the root URL
map, the Celery app and the WSGI entry point. The apps (portal, scheduling, clusters, …) live
beside it and know nothing of it.

The Celery app is imported here so that ``@shared_task`` binds to it whenever Django starts
(Django imports this package first, for its settings).
"""

from config.celery import app as celery_app

__all__ = ["celery_app"]
