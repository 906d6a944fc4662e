"""The root URL map: pages at the root, the REST API under /api/v1/, the schema and its docs."""

from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularSwaggerSplitView,
)

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("portal.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path(
        "api/docs/",
        # The split view serves its start-up script from ?script, not inline (the CSP).
        SpectacularSwaggerSplitView.as_view(
            url_name="api-schema", template_name="api/swagger_ui.html"
        ),
        name="api-docs",
    ),
    path("clusters/", include("clusters.urls")),
    path("", include("scheduling.urls")),
    path("", include("dashboards.urls")),
    path("", include("notifications.urls")),
    path("", include("identity.urls")),
    path("", include("portal.web.urls")),
]

# Errors outside DRF's views answer in the API's JSON shape under /api/, a plain page elsewhere.
handler400 = "portal.errors.bad_request"
handler403 = "portal.errors.permission_denied"
handler404 = "portal.errors.page_not_found"
handler500 = "portal.errors.server_error"

if settings.GPUPOOL_BENCH_ENDPOINTS:  # pragma: no cover - benchmark runs only
    from portal.api.bench import BareInsertView

    urlpatterns.insert(0, path("api/bench/bare-insert/", BareInsertView.as_view()))
