"""A team's ``max_queued_jobs`` and ``max_queued_jobs_per_user``, or where its policy leaves
them empty the pool's defaults (``GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM`` / ``_PER_USER``):
submissions that would queue more are refused, whole, with a 429 naming the limit.

The limit counts the team's QUEUED jobs (those still waiting for the scheduler), so it frees
up as jobs are admitted, finish or are cancelled. It is enforced on every way in: REST, the
batch endpoint and the web form, and holds under concurrent submits.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from portal.jobs.services import job_cancel, job_submit
from portal.jobs.state import job_transition
from portal.models import Job, JobEvent, JobState
from scheduling.models import TeamPolicy
from tests.conftest import job_body
from tests.factories import JobFactory, MembershipFactory, TeamFactory, UserFactory
from tests.portal.test_pages import FORM

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"


def _limit(team, n: int | None) -> None:
    TeamPolicy.objects.update_or_create(team=team, defaults={"max_queued_jobs": n})


def test_a_submit_beyond_the_limit_is_refused_naming_the_team(api_as, bob, vision, catalog):
    _limit(vision, 2)
    client = api_as(bob)
    for i in range(2):
        assert client.post(URL, job_body(name=f"j{i}"), format="json").status_code == 201
    response = client.post(URL, job_body(name="third"), format="json")
    assert response.status_code == 429
    body = response.json()
    assert "Vision already has 2 queued jobs and may have at most 2" in body["message"]
    assert body["extra"]["fields"]["team"] == ["The team's queue is full (2 of 2 queued jobs)."]
    assert Job.objects.count() == 2 and JobEvent.objects.count() == 2


def test_only_waiting_jobs_count_against_the_limit(api_as, bob, vision, catalog):
    _limit(vision, 1)
    client = api_as(bob)
    first = Job.objects.get(public_id=client.post(URL, job_body(), format="json").json()["id"])
    assert client.post(URL, job_body(), format="json").status_code == 429
    taken = job_transition(  # the scheduler took it
        job_id=first.pk, expected=JobState.QUEUED, to=JobState.ADMITTED, reason="Admitted"
    )
    assert taken
    assert client.post(URL, job_body(name="next"), format="json").status_code == 201
    waiting = Job.objects.get(name="next")
    job_cancel(job=waiting, by=bob)  # a cancelled job frees its place too
    assert client.post(URL, job_body(name="after"), format="json").status_code == 201


def test_another_teams_queue_does_not_count(api_as, bob, charlie, vision, language, catalog):
    _limit(vision, 1)
    JobFactory.create_batch(3, team=language, state=JobState.QUEUED)
    assert api_as(bob).post(URL, job_body(), format="json").status_code == 201


def test_a_cleared_limit_falls_back_to_the_default(api_as, bob, vision, catalog, settings):
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM = 7
    JobFactory.create_batch(5, team=vision, state=JobState.QUEUED)
    _limit(vision, 5)
    assert api_as(bob).post(URL, job_body(), format="json").status_code == 429
    _limit(vision, None)
    assert api_as(bob).post(URL, job_body(), format="json").status_code == 201


def test_a_limit_of_zero_refuses_every_submit(api_as, bob, vision, catalog):
    _limit(vision, 0)
    response = api_as(bob).post(URL, job_body(), format="json")
    assert response.status_code == 429
    assert "(0 of 0 queued jobs)" in response.json()["extra"]["fields"]["team"][0]


def test_a_retry_of_a_created_job_is_answered_even_when_the_queue_is_full(
    api_as, bob, vision, catalog
):
    _limit(vision, 1)
    client = api_as(bob)
    first = client.post(URL, job_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = client.post(URL, job_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    fresh = client.post(URL, job_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    assert fresh.status_code == 429


def test_a_batch_that_would_overfill_the_queue_stores_nothing(api_as, bob, vision, catalog):
    _limit(vision, 3)
    client = api_as(bob)
    assert client.post(URL, job_body(name="already"), format="json").status_code == 201
    jobs = [job_body(name=f"sweep-{i}") for i in range(3)]
    response = client.post(URL + "batch/", {"jobs": jobs}, format="json")
    assert response.status_code == 429
    assert "these 3 jobs would exceed it" in response.json()["message"]
    assert list(response.json()["extra"]["fields"]) == ["jobs[0].team"]
    assert Job.objects.count() == 1
    ok = client.post(URL + "batch/", {"jobs": jobs[:2]}, format="json")
    assert ok.status_code == 201
    assert Job.objects.filter(state=JobState.QUEUED).count() == 3


def test_a_batch_counts_each_team_against_its_own_limit(api_as, vision, language, catalog):
    both = UserFactory(username="both")
    MembershipFactory(user=both, team=vision)
    MembershipFactory(user=both, team=language)
    _limit(vision, 5)
    _limit(language, 1)
    jobs = [job_body(name="v1"), job_body(name="l1", team="language"), job_body(name="v2")]
    jobs.append(job_body(name="l2", team="language"))
    response = api_as(both).post(URL + "batch/", {"jobs": jobs}, format="json")
    assert response.status_code == 429
    assert list(response.json()["extra"]["fields"]) == ["jobs[1].team"]
    assert "Language already has 0 queued jobs and may have at most 1" in response.json()["message"]
    assert Job.objects.count() == 0


def test_the_web_form_shows_the_full_queue(client, bob, vision, catalog):
    _limit(vision, 0)
    client.force_login(bob)
    response = client.post("/jobs/new/", FORM)
    assert response.status_code == 429  # as the API answers
    assert "The team&#x27;s queue is full (0 of 0 queued jobs)." in response.content.decode()
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_submits_never_take_more_places_than_the_limit(catalog):
    if connection.vendor != "postgresql":
        pytest.skip("the lock under test is PostgreSQL's")
    team = TeamFactory(name="Race", slug="race")
    user = UserFactory(username="racer")
    MembershipFactory(user=user, team=team)
    _limit(team, 5)
    start = threading.Barrier(12)
    outcomes: list[str] = []

    def submit(i: int) -> None:
        from django.db import connections

        start.wait()
        try:
            job_submit(user=user, data=job_body(team="race", name=f"r{i}"))
            outcomes.append("created")
        except Exception as exc:
            outcomes.append(type(exc).__name__)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["TooManyQueued"] * 7 + ["created"] * 5
    assert Job.objects.filter(team=team, state=JobState.QUEUED).count() == 5


def _member_limit(team, n: int | None) -> None:
    TeamPolicy.objects.update_or_create(team=team, defaults={"max_queued_jobs_per_user": n})


def test_a_member_beyond_their_own_limit_is_refused_others_are_not(
    api_as, alice, bob, vision, catalog
):
    _member_limit(vision, 2)
    for i in range(2):
        assert api_as(bob).post(URL, job_body(name=f"b{i}"), format="json").status_code == 201
    response = api_as(bob).post(URL, job_body(name="b2"), format="json")
    assert response.status_code == 429
    body = response.json()
    assert (
        "You already have 2 queued jobs in Vision, where each member may have at most 2"
        in (body["message"])
    )
    assert body["extra"]["fields"]["team"] == [
        "Your queue in this team is full (2 of 2 queued jobs per member)."
    ]
    assert api_as(alice).post(URL, job_body(name="a0"), format="json").status_code == 201
    assert Job.objects.count() == 3


def test_a_members_jobs_in_another_team_do_not_count(api_as, bob, vision, language, catalog):
    MembershipFactory(user=bob, team=language)
    _member_limit(vision, 1)
    JobFactory.create_batch(3, team=language, owner=bob, state=JobState.QUEUED)
    assert api_as(bob).post(URL, job_body(), format="json").status_code == 201


def test_a_batch_beyond_the_member_limit_stores_nothing(api_as, bob, vision, catalog):
    _member_limit(vision, 3)
    client = api_as(bob)
    assert client.post(URL, job_body(name="already"), format="json").status_code == 201
    jobs = [job_body(name=f"sweep-{i}") for i in range(3)]
    response = client.post(URL + "batch/", {"jobs": jobs}, format="json")
    assert response.status_code == 429
    assert list(response.json()["extra"]["fields"]) == ["jobs[0].team"]
    assert "these 3 jobs would exceed it" in response.json()["message"]
    assert Job.objects.count() == 1


def test_the_web_form_shows_the_full_member_queue(client, bob, vision, catalog):
    _member_limit(vision, 0)
    client.force_login(bob)
    response = client.post("/jobs/new/", FORM)
    assert response.status_code == 429
    assert "Your queue in this team is full (0 of 0 queued jobs per member)." in (
        response.content.decode()
    )
    assert not Job.objects.exists()


def test_platform_admins_set_the_member_limit_over_rest(api_as, root, vision, catalog):
    response = api_as(root).post(
        "/api/v1/team-policies/",
        {"team": "vision", "max_queued_jobs_per_user": 5},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["max_queued_jobs_per_user"] == 5
    assert TeamPolicy.objects.get(team=vision).max_queued_jobs_per_user == 5


# --- The pool's defaults, for a team whose policy leaves a limit empty ------------------------


def test_a_team_without_a_policy_is_held_to_the_default_team_limit(
    api_as, alice, bob, vision, catalog, settings
):
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM = 3
    JobFactory.create_batch(2, team=vision, owner=alice, state=JobState.QUEUED)
    assert api_as(bob).post(URL, job_body(name="b0"), format="json").status_code == 201
    response = api_as(bob).post(URL, job_body(name="b1"), format="json")
    assert response.status_code == 429
    assert "Retry-After" not in response.headers  # no one can say when a place frees
    body = response.json()
    assert body["message"].startswith(
        "Vision already has 3 queued jobs and may have at most 3 (the pool's default); this "
        "job would exceed it. Wait for queued jobs to start, or cancel some"
    )
    assert "a platform admin can raise the limit in the team's policy" in body["message"]
    assert body["extra"]["fields"]["team"] == ["The team's queue is full (3 of 3 queued jobs)."]
    assert Job.objects.count() == 3 and not TeamPolicy.objects.exists()


def test_a_member_without_a_policy_is_held_to_the_default_member_limit(
    api_as, alice, bob, vision, catalog, settings
):
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_USER = 2
    client = api_as(bob)
    for i in range(2):
        assert client.post(URL, job_body(name=f"b{i}"), format="json").status_code == 201
    response = client.post(URL, job_body(name="b2"), format="json")
    assert response.status_code == 429
    body = response.json()
    assert body["message"].startswith(
        "You already have 2 queued jobs in Vision, where each member may have at most 2 (the "
        "pool's default); this job would exceed it."
    )
    assert body["extra"]["fields"]["team"] == [
        "Your queue in this team is full (2 of 2 queued jobs per member)."
    ]
    assert api_as(alice).post(URL, job_body(name="a0"), format="json").status_code == 201


def test_one_user_queues_at_most_1000_jobs_in_a_team_by_default(api_as, bob, vision, catalog):
    """The report: one user queued 2,000 jobs in 1.6 s into a team without a policy."""
    client = api_as(bob)
    sweep = [job_body(name=f"sweep-{i}") for i in range(1000)]
    assert client.post(URL + "batch/", {"jobs": sweep}, format="json").status_code == 201
    response = client.post(URL, job_body(name="one-more"), format="json")
    assert response.status_code == 429
    assert response.json()["extra"]["fields"]["team"] == [
        "Your queue in this team is full (1000 of 1000 queued jobs per member)."
    ]
    again = client.post(URL + "batch/", {"jobs": sweep[:2]}, format="json")
    assert again.status_code == 429
    assert "these 2 jobs would exceed it" in again.json()["message"]
    assert Job.objects.count() == 1000


def test_a_policy_value_wins_over_the_default_either_way(api_as, bob, vision, catalog, settings):
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM = 2
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_USER = 2
    TeamPolicy.objects.create(team=vision, max_queued_jobs=4, max_queued_jobs_per_user=3)
    client = api_as(bob)
    assert [client.post(URL, job_body(), format="json").status_code for _ in range(4)] == [
        201,
        201,
        201,
        429,
    ]
    message = client.post(URL, job_body(), format="json").json()["message"]
    assert "may have at most 3 (the team's policy)" in message
    _limit(vision, 1)  # lower than the default wins too
    _member_limit(vision, None)  # and a cleared member limit is the default's again
    message = client.post(URL, job_body(), format="json").json()["message"]
    assert "Vision already has 3 queued jobs and may have at most 1 (the team's policy)" in message


def test_a_batch_beyond_the_default_is_refused_whole(api_as, bob, vision, catalog, settings):
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_USER = 2
    jobs = [job_body(name=f"sweep-{i}") for i in range(3)]
    response = api_as(bob).post(URL + "batch/", {"jobs": jobs}, format="json")
    assert response.status_code == 429
    assert list(response.json()["extra"]["fields"]) == ["jobs[0].team"]
    assert "(the pool's default)" in response.json()["message"]
    assert not Job.objects.exists()


def test_the_web_form_shows_the_default_limit(client, bob, vision, catalog, settings):
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM = 1
    JobFactory(team=vision, state=JobState.QUEUED)
    client.force_login(bob)
    response = client.post("/jobs/new/", FORM)
    assert response.status_code == 429
    assert "The team&#x27;s queue is full (1 of 1 queued jobs)." in response.content.decode()
    assert 'value="' + FORM["name"] + '"' in response.content.decode()  # what was typed stays
    assert Job.objects.count() == 1


def test_a_member_limit_without_a_team_limit_counts_the_members_own(
    api_as, alice, bob, vision, catalog, settings
):
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM = 0
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_USER = 2
    JobFactory.create_batch(3, team=vision, owner=alice, state=JobState.QUEUED)
    client = api_as(bob)
    assert [client.post(URL, job_body(), format="json").status_code for _ in range(3)] == [
        201,
        201,
        429,
    ]
    assert (
        "(2 of 2 queued jobs per member)"
        in (client.post(URL, job_body(), format="json").json()["extra"]["fields"]["team"][0])
    )


def test_a_default_of_zero_is_no_default_limit(api_as, bob, vision, catalog, settings):
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM = 0
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_USER = 0
    JobFactory.create_batch(3, team=vision, owner=bob, state=JobState.QUEUED)
    assert api_as(bob).post(URL, job_body(), format="json").status_code == 201
    _limit(vision, 4)  # a policy still limits
    assert api_as(bob).post(URL, job_body(), format="json").status_code == 429


def test_the_check_costs_no_round_trip_of_its_own(bob, vision, catalog, settings):
    """What every submit now pays: the team's lock, both counts and the insert go as one query
    string, where a submit without limits sends the insert alone."""
    from django.test.utils import CaptureQueriesContext

    job_submit(user=bob, data=job_body(name="warm"))  # caches filled
    with CaptureQueriesContext(connection) as checked:
        job_submit(user=bob, data=job_body(name="checked"))
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM = 0
    settings.GPUPOOL_MAX_QUEUED_JOBS_PER_USER = 0
    with CaptureQueriesContext(connection) as unchecked:
        job_submit(user=bob, data=job_body(name="unchecked"))
    if connection.vendor != "postgresql":
        pytest.skip("one query string is PostgreSQL's")
    assert len(checked.captured_queries) == len(unchecked.captured_queries)
    (insert,) = [q["sql"] for q in checked.captured_queries if "INSERT INTO" in q["sql"]]
    assert insert.startswith("SELECT pg_advisory_xact_lock(")
    assert "COUNT(*)" in insert
    assert Job.objects.filter(name="checked").exists()


@pytest.mark.django_db(transaction=True)
def test_a_count_waiting_on_the_lock_sees_what_the_holder_committed(catalog):
    """The lock and the count share a round trip but not a statement: the count's snapshot is
    taken after the lock is granted, so it sees the job the holder inserted."""
    if connection.vendor != "postgresql":
        pytest.skip("the lock under test is PostgreSQL's")
    from django.db import connections, transaction

    from portal.db import transaction_lock_and_select
    from portal.jobs.services import QUEUE_LIMIT_LOCK_NAMESPACE

    team = TeamFactory(name="Race", slug="race")
    user = UserFactory(username="racer")
    MembershipFactory(user=user, team=team)
    count = "SELECT COUNT(*) FROM portal_job WHERE team_id = %s"
    holding, counted = threading.Event(), []

    def waiter() -> None:
        holding.wait()
        try:
            with transaction.atomic():
                counted.append(
                    transaction_lock_and_select(
                        QUEUE_LIMIT_LOCK_NAMESPACE, team.pk, count, [team.pk], using="default"
                    )[0]
                )
        finally:
            connections.close_all()

    thread = threading.Thread(target=waiter)
    thread.start()
    with transaction.atomic():
        transaction_lock_and_select(
            QUEUE_LIMIT_LOCK_NAMESPACE, team.pk, count, [team.pk], using="default"
        )
        holding.set()
        thread.join(timeout=0.5)  # the waiter now waits on the lock
        assert thread.is_alive()
        JobFactory(team=team, owner=user, state=JobState.QUEUED)
    thread.join()
    assert counted == [1]


def test_the_default_settings_and_their_validation():
    import subprocess
    import sys

    code = (
        "import django; from django.conf import settings as s; "
        "print(s.GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM, s.GPUPOOL_MAX_QUEUED_JOBS_PER_USER)"
    )

    def run(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code],
            env={"DJANGO_SETTINGS_MODULE": "config.settings", **env},
            capture_output=True,
            text=True,
            check=False,
        )

    assert run().stdout.split() == ["5000", "1000"]
    assert run(GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM="0").stdout.split() == ["0", "1000"]
    for name, bad in (
        ("GPUPOOL_MAX_QUEUED_JOBS_PER_USER", "-1"),
        ("GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM", "lots"),
    ):
        result = run(**{name: bad})
        assert result.returncode != 0 and name in result.stderr
