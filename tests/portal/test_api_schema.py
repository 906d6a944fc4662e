"""Property-based API testing: schemathesis drives every operation in the OpenAPI schema,
in-process over WSGI, as Bob (member of Vision). No input may produce a 5xx."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from portal.tokens import api_token_create
from portal.wsgi import application

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)


@pytest.fixture
def bob_token(bob, catalog):
    return api_token_create(user=bob, name="schemathesis")[1]


@pytest.fixture(autouse=True)
def _keep_the_test_transaction_open():
    """Like Django's test Client: requests must not close the connection holding the test's
    transaction (the WSGI handler would, at request end)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_makes_the_api_fail(case, bob_token):
    response = case.call(headers={"Authorization": f"Bearer {bob_token}"})
    assert response.status_code < 500, response.text
    case.validate_response(response, checks=[not_a_server_error])


def test_the_schema_documents_every_job_endpoint():
    raw = schema.raw_schema
    for path in (
        "/api/v1/jobs/",
        "/api/v1/jobs/batch/",
        "/api/v1/jobs/{job_id}/",
        "/api/v1/jobs/{job_id}/cancel/",
        "/api/v1/jobs/{job_id}/events/",
        "/api/v1/gpu-models/",
        "/api/v1/teams/",
    ):
        assert path in raw["paths"], path
    assert "apiToken" in raw["components"]["securitySchemes"]
