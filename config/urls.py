"""The root URL map: every app's pages at the root and its REST API under /api/v1/, the
schema and its docs, the admin.

Each app mounts itself the same way: ``<app>/urls.py`` holds its pages and
``<app>/api_urls.py`` its REST routes, each with its full path below the mount point and
its own URL names. The order of ``APPS`` is the order a path is tried in, and it matters
once: scheduling's ``api/v1/jobs/estimate/`` comes before the portal's
``api/v1/jobs/<job_id>/``, so the portal comes last.
"""

from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularSwaggerSplitView,
)

APPS = ("clusters", "scheduling", "dashboards", "notifications", "identity", "portal")

urlpatterns = [
    path("admin/", admin.site.urls),
    *(path("api/v1/", include(f"{app}.api_urls")) for app in APPS),
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
