"""Bench-only endpoint: the floor that ``POST /api/v1/jobs/`` is measured against.

``BareInsertView`` runs through the same DRF stack as the real API (the default token and
session authentication, ``IsAuthenticated``, the JSON parser and renderer) and then does exactly
one INSERT of the request body, into a table that ``bench/submit_server.py`` creates with raw
SQL (``BARE_TABLE_DDL``, in ``setup_django_data``), so no model or migration exists for it. It
is mounted only when ``GPUPOOL_BENCH_ENDPOINTS`` is true and is left out of the OpenAPI schema.
"""

from __future__ import annotations

import json

from django.db import connection
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

BARE_TABLE = "bench_bare_insert"
BARE_TABLE_DDL = (
    f"CREATE TABLE IF NOT EXISTS {BARE_TABLE} ("
    "id bigserial PRIMARY KEY, "
    "owner_id integer NOT NULL, "
    "body jsonb NOT NULL, "
    "created_at timestamptz NOT NULL DEFAULT now())"
)


@extend_schema(exclude=True)
class BareInsertView(APIView):
    """Authenticate, parse the JSON body, INSERT it as one row, answer 201 with the row id."""

    def post(self, request: Request) -> Response:
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {BARE_TABLE} (owner_id, body) VALUES (%s, %s) RETURNING id",  # noqa: S608 - constant name
                [request.user.pk, json.dumps(request.data)],
            )
            (row_id,) = cursor.fetchone()
        return Response({"id": row_id}, status=status.HTTP_201_CREATED)
