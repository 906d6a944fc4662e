"""A job's retry budget (Volcano maxRetry): one bounded field, the same through form and REST."""

from __future__ import annotations

import pytest

from portal.models import Job
from tests.conftest import job_body
from tests.portal.test_pages import FORM

URL = "/api/v1/jobs/"

pytestmark = pytest.mark.django_db


def test_rest_takes_a_retry_budget_and_shows_it(api_as, bob, catalog):
    response = api_as(bob).post(URL, job_body(max_retry=5), format="json")
    assert response.status_code == 201, response.content
    assert response.json()["max_retry"] == 5
    assert Job.objects.get().max_retry == 5


def test_the_default_is_volcanos(api_as, bob, catalog):
    response = api_as(bob).post(URL, job_body(), format="json")
    assert response.status_code == 201 and response.json()["max_retry"] == 3


@pytest.mark.parametrize("value", [-1, 11, "lots"])
def test_a_budget_out_of_bounds_is_refused_naming_the_field(api_as, bob, catalog, value):
    response = api_as(bob).post(URL, job_body(max_retry=value), format="json")
    assert response.status_code == 400
    assert "max_retry" in response.json()["extra"]["fields"]


def test_the_bound_is_a_setting(api_as, bob, catalog, settings):
    settings.GPUPOOL_MAX_RETRY = 1
    response = api_as(bob).post(URL, job_body(max_retry=2), format="json")
    assert response.status_code == 400
    assert response.json()["extra"]["fields"]["max_retry"] == ["Must be at most 1."]


def test_the_form_takes_a_retry_budget(client, bob, catalog):
    client.force_login(bob)
    response = client.post("/jobs/new/", {**FORM, "max_retry": "0"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Job.objects.get().max_retry == 0
