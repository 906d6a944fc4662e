"""The root URL map: every app's pages at the root and its REST API under /api/v1/, the
schema and its docs, the admin.

Each app mounts itself the same way: ``<app>/urls.py`` holds its pages and
``<app>/api_urls.py`` its REST routes, each with its full path below the mount point and
its own URL names. The order is the order a path is tried in: the portal's routes first
under ``/api/v1/``, since a submit and a job's page are what is asked most (every route
tried before the right one is a regular expression matched per request); its job routes
take no id that another app's route names (``portal.api_urls.JobId``). Its pages come last,
where its ``jobs/<job_id>/`` would take scheduling's ``jobs/new/estimate/``.
"""

from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularSwaggerSplitView,
)

APPS = ("clusters", "scheduling", "dashboards", "notifications", "identity", "portal")
API_ORDER = ("portal", "clusters", "scheduling", "dashboards", "notifications", "identity")

urlpatterns = [
    path("admin/", admin.site.urls),
    *(path("api/v1/", include(f"{app}.api_urls")) for app in API_ORDER),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path(
        "api/docs/",
        # The split view serves its start-up script from ?script, not inline (the CSP).
        SpectacularSwaggerSplitView.as_view(
            url_name="api-schema", template_name="api/swagger_ui.html"
        ),
        name="api-docs",
    ),
    *(path("", include(f"{app}.urls")) for app in APPS),
]

# Errors outside DRF's views answer in the API's JSON shape under /api/, a plain page elsewhere.
handler400 = "portal.errors.bad_request"
handler403 = "portal.errors.permission_denied"
handler404 = "portal.errors.page_not_found"
handler500 = "portal.errors.server_error"

if settings.GPUPOOL_BENCH_ENDPOINTS:  # pragma: no cover - benchmark runs only
    from portal.api.bench import BareInsertView

    urlpatterns.insert(0, path("api/bench/bare-insert/", BareInsertView.as_view()))
