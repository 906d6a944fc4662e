"""The REST API (Django REST framework) and its OpenAPI schema (drf-spectacular)."""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# REST framework and OpenAPI
# ---------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # DRF's three, with a JSON depth limit and no NUL in any string (portal/api/parsers.py)
    "DEFAULT_PARSER_CLASSES": [
        "portal.api.parsers.StrictJSONParser",
        "portal.api.parsers.StrictFormParser",
        "portal.api.parsers.StrictMultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.JobCursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "portal.api.schema.PortalAutoSchema",
    "EXCEPTION_HANDLER": "portal.api.errors.api_exception_handler",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "gpupool API",
    "DESCRIPTION": "Submit and follow GPU jobs on a shared pool of Kubernetes clusters.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "portal.models.JobState",
        "ClusterStateEnum": "clusters.models.ClusterState",
        # A team policy's max_priority names priorities as a submit does: one enum in the schema.
        "PriorityEnum": ["low", "normal", "high"],
        # Two "kind" choice sets: a job's (training, inference) and its endpoint's.
        "EndpointKindEnum": ["clusterip", "ingress"],
        "JobKindEnum": "portal.models.JobKind",
    },
}
