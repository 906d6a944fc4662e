"""URL map: pages at the root, the REST API under /api/v1/, the schema and its docs."""

from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("portal.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("clusters/", include("clusters.urls")),
    path("", include("scheduling.urls")),
    path("", include("dashboards.urls")),
    path("", include("portal.web.urls")),
]

if settings.GPUPOOL_BENCH_ENDPOINTS:  # pragma: no cover - benchmark runs only
    from portal.api.bench import BareInsertView

    urlpatterns.insert(0, path("api/bench/bare-insert/", BareInsertView.as_view()))
