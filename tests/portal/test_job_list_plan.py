"""The job list filters on the caller's team ids as values, so PostgreSQL plans by team size.

With a membership subquery instead, the planner cannot tell a small team from a big one and
pages newest-first by walking the primary key, which for a team whose jobs are all older than
everyone else's reads the whole table (seconds at a million jobs, see bench/submit_bench.py).
"""

from __future__ import annotations

import pytest

from portal.access import job_get_for_user, jobs_visible_to
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def test_the_list_query_names_the_team_ids_not_a_subquery(bob, vision, language):
    sql = str(jobs_visible_to(bob).query)
    assert "portal_membership" not in sql
    assert f"IN ({vision.pk})" in sql


def test_a_user_without_teams_sees_no_jobs_and_costs_one_query(django_assert_num_queries, vision):
    from tests.factories import UserFactory

    loner = UserFactory(username="loner")
    JobFactory(team=vision)
    with django_assert_num_queries(1):
        assert list(jobs_visible_to(loner)) == []


def test_a_job_by_id_is_still_one_query(bob, vision, django_assert_num_queries):
    job = JobFactory(owner=bob, team=vision)
    with django_assert_num_queries(1):
        assert job_get_for_user(bob, job.public_id) == job


def test_a_team_filter_reaches_the_query_as_an_id(api_as, bob, vision, language):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.factories import MembershipFactory

    MembershipFactory(user=bob, team=language)  # visibility alone reads IN (vision, language)
    JobFactory(owner=bob, team=vision)
    JobFactory(owner=bob, team=language)
    with CaptureQueriesContext(connection) as queries:
        response = api_as(bob).get("/api/v1/jobs/?team=vision&state=QUEUED")
    assert len(response.json()["results"]) == 1
    listing = queries.captured_queries[-1]["sql"]
    assert f'"portal_job"."team_id" IN ({vision.pk})' in listing
    # and it only narrows: a team the caller is not in still finds nothing
    assert api_as(bob).get("/api/v1/jobs/?team=robotics").json()["results"] == []
