"""What the job pages say, checked the way a user reads them (issue 32): a command that pastes
back as the same command, the first-choice model called that, facts in the timeline that are
not transitions, a cancel button only on a job that can still be cancelled and worded by
state, and no Submit for someone who cannot submit."""

from __future__ import annotations

import html
import re
import shlex

import pytest
from django.utils import timezone

from portal.jobs.services import job_submit
from portal.models import JobEvent, JobState, JobTemplate, Membership, Role, TemplateScope
from scheduling.cycle import run_cycle
from tests.conftest import job_body
from tests.factories import JobFactory, UserFactory
from tests.scheduling.conftest import pool, quota  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db

SUBMIT_LINK = 'href="/jobs/new/">Submit</a>'


def _code(page: str, element_id: str) -> str:
    found = re.search(rf'<code id="{element_id}">(.*?)</code>', page, re.S)
    assert found, f"no #{element_id} on the page"
    return html.unescape(found.group(1))


def _text(fragment: str) -> str:
    """The words of an HTML fragment, tags dropped and spaces folded, as a reader sees them."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _section(page: str, element_id: str) -> str:
    start = page.index(f'id="{element_id}"')
    return page[start : page.index("</section>", start)]


# -- 1. the command, quoted the POSIX way ---------------------------------------------------


def test_the_command_shown_pastes_back_as_the_same_words(client, bob, vision):
    command = ["sh", "-c", "torchrun --nproc 8 train.py"]
    job = JobFactory(owner=bob, team=vision, command=command, args=["--note", "it's here"])
    client.force_login(bob)
    shown = _code(client.get(f"/jobs/{job.public_id}/").content.decode(), "job-command")
    assert shown == "sh -c 'torchrun --nproc 8 train.py' --note 'it'\"'\"'s here'"
    assert shlex.split(shown) == [*command, "--note", "it's here"]
    live = client.get(f"/jobs/{job.public_id}/?fragment=live").content.decode()
    assert _code(live, "job-command") == shown  # the refreshed facts say the same


def test_a_job_without_a_command_says_it_runs_the_images_entrypoint(client, bob, vision):
    job = JobFactory(owner=bob, team=vision, command=[], args=[])
    client.force_login(bob)
    page = client.get(f"/jobs/{job.public_id}/").content.decode()
    assert "the image's own entrypoint" in html.unescape(page)


def test_the_template_list_quotes_what_each_template_runs(client, bob, vision):
    JobTemplate.objects.create(
        name="ddp",
        scope=TemplateScope.PERSONAL,
        team=vision,
        owner=bob,
        spec={"image": "pytorch:24.05", "command": ["bash", "-lc", "torchrun train.py"]},
    )
    client.force_login(bob)
    page = html.unescape(client.get("/templates/").content.decode())
    assert "<code>bash -lc 'torchrun train.py'</code>" in page


# -- 2. the first-choice model is not a fallback ----------------------------------------------


@pytest.fixture
def first_choice_elsewhere(bob, vision, pool, quota):  # noqa: F811
    """A job that names a100-80gb first and a100-40gb second under the "cheapest" policy:
    the scheduler tries the cheaper a100-40gb first (no room there) and admits the job on
    a100-80gb, the model the user asked for first."""
    pool("east", "a100-80gb", nodes=1, gpus=8)
    pool("west", "a100-40gb", nodes=1, gpus=2)
    quota(vision, "a100-80gb", nominal=8)
    quota(vision, "a100-40gb", nominal=8)

    def submit(models: list[str], policy: str):
        body = job_body(name="ddp", replicas=1, gpus_per_replica=4, gpu_models=models)
        body.pop("min_gpu_memory_gib")
        body["selection_policy"] = policy
        job = job_submit(user=bob, data=body).job
        run_cycle()
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED and job.gpu_model.key == "a100-80gb"
        return job

    return submit


def test_the_users_first_choice_is_called_that_not_a_fallback(client, bob, first_choice_elsewhere):
    job = first_choice_elsewhere(["a100-80gb", "a100-40gb"], "cheapest")
    # The scheduler's own words (the API, the CLI and notifications show them too).
    assert "your first choice" in job.placement["message"]
    assert "fallback" not in job.placement["message"]
    client.force_login(bob)
    page = client.get(f"/jobs/{job.public_id}/").content.decode()
    why = _text(page[page.index('id="placement-message"') :].split("</p>", 1)[0])
    assert "your first choice" in why and "fallback" not in why
    timeline = _text(_section(page, "job-timeline"))
    assert "your first choice" in timeline and "fallback candidate" not in timeline


def test_a_later_candidate_is_still_called_a_fallback(client, bob, first_choice_elsewhere):
    job = first_choice_elsewhere(["a100-40gb", "a100-80gb"], "ordered")
    client.force_login(bob)
    page = client.get(f"/jobs/{job.public_id}/").content.decode()
    why = _text(page[page.index('id="placement-message"') :].split("</p>", 1)[0])
    assert "fallback candidate" in why and "your first choice" not in why


# -- 3. facts in the timeline are not transitions ---------------------------------------------


def test_a_fact_in_the_timeline_reads_as_a_fact_not_an_arrow(client, bob, vision):
    job = JobFactory(owner=bob, team=vision)
    now = timezone.now()
    JobEvent.objects.create(
        job=job, created_at=now, from_state="", to_state=JobState.QUEUED, reason="Submitted"
    )
    JobEvent.objects.create(
        job=job,
        created_at=now,
        from_state=JobState.QUEUED,
        to_state=JobState.QUEUED,
        reason="QueueLimit",
        message="a note about the job",
    )
    client.force_login(bob)
    timeline = _text(
        _section(client.get(f"/jobs/{job.public_id}/").content.decode(), "job-timeline")
    )
    assert "QUEUED → QUEUED" not in timeline
    assert "in QUEUED · QueueLimit: a note about the job" in timeline
    assert " QUEUED · Submitted" in timeline  # the first entry: just the state it began in


# -- 5. the cancel button and its words -------------------------------------------------------


def test_the_refresh_that_finds_the_job_ended_takes_the_cancel_button_away(client, bob, vision):
    job = JobFactory(owner=bob, team=vision, state=JobState.RUNNING)
    client.force_login(bob)
    page = client.get(f"/jobs/{job.public_id}/").content.decode()
    assert "Cancel job…" in page
    running = client.get(f"/jobs/{job.public_id}/?fragment=live").content.decode()
    assert 'id="job-actions"' not in running  # untouched while it runs: focus on it survives
    job.state = JobState.SUCCEEDED
    job.save()
    ended = client.get(f"/jobs/{job.public_id}/?fragment=live").content.decode()
    tag = ended[ended.index('id="job-actions"') :].split(">", 1)[0]
    assert 'hx-swap-oob="true"' in tag  # swapped in place of the page's own
    assert "Cancel job…" not in ended and "Resubmit…" in ended
    assert "Cancel job…" not in client.get(f"/jobs/{job.public_id}/").content.decode()


def test_cancelling_a_queued_job_does_not_talk_of_pods(client, bob, vision):
    job = JobFactory(owner=bob, team=vision)
    client.force_login(bob)
    words = _text(client.get(f"/jobs/{job.public_id}/cancel/").content.decode())
    assert "stops its pods" not in words
    assert "no pods" in words and "out of the queue" in words
    assert "Yes, cancel the job" in words


def test_cancelling_a_running_job_says_it_stops_its_pods(client, bob, vision):
    job = JobFactory(owner=bob, team=vision, state=JobState.RUNNING)
    client.force_login(bob)
    words = _text(client.get(f"/jobs/{job.public_id}/cancel/").content.decode())
    assert "stops its pods and frees its GPUs" in words


def test_an_ended_job_offers_no_cancel_on_its_confirm_page(client, bob, vision):
    job = JobFactory(owner=bob, team=vision, state=JobState.SUCCEEDED)
    client.force_login(bob)
    words = _text(client.get(f"/jobs/{job.public_id}/cancel/").content.decode())
    assert "already ended" in words and "Yes, cancel the job" not in words


# -- 6. who is offered Submit ----------------------------------------------------------------


def test_submit_is_in_the_nav_only_for_someone_who_may_submit(client, bob, victor, root):
    client.force_login(bob)
    assert client.get("/jobs/").content.decode().count(SUBMIT_LINK) == 1
    client.force_login(victor)
    assert SUBMIT_LINK not in client.get("/jobs/").content.decode()
    client.force_login(root)  # a platform admin, in no team
    assert SUBMIT_LINK not in client.get("/jobs/").content.decode()


def test_submit_shows_once_for_someone_in_several_teams(client, bob, language):
    Membership.objects.create(user=bob, team=language, role=Role.ADMIN)
    client.force_login(bob)
    nav = client.get("/jobs/").content.decode()
    assert nav.count(SUBMIT_LINK) == 1
    assert nav.count(">My teams</a>") == 1  # read from the same roles: a team admin's link


def test_the_nav_reads_the_roles_once_whatever_it_shows(
    client, alice, bob, root, django_assert_max_num_queries
):
    """Submit and My teams come from one read of the user's roles (as many queries as the
    job list made before it had either)."""
    JobFactory(owner=alice, team=alice.memberships.get().team)
    client.force_login(alice)
    with django_assert_max_num_queries(6):
        nav = client.get("/jobs/").content.decode()
    assert nav.count(SUBMIT_LINK) == 1 and nav.count(">My teams</a>") == 1
    client.force_login(bob)
    assert ">My teams</a>" not in client.get("/jobs/").content.decode()
    client.force_login(root)
    assert client.get("/jobs/").content.decode().count(">My teams</a>") == 1


def test_a_viewer_who_reaches_submit_is_told_they_view_not_that_they_are_in_no_team(
    client, victor, catalog
):
    client.force_login(victor)
    response = client.get("/jobs/new/")
    assert response.status_code == 200
    page = response.content.decode()
    words = _text(page[page.index('id="no-team"') :].split("</div>", 1)[0])
    assert "viewer (read-only)" in words and "Vision" in words
    assert "make you a member" in words
    assert "not in any team" not in words and "no team" not in words
    assert 'name="image"' not in page


def test_someone_in_no_team_is_told_so(client, catalog):
    loner = UserFactory(username="loner")
    client.force_login(loner)
    page = client.get("/jobs/new/").content.decode()
    assert "not in any team yet" in _text(page)


def test_a_filtered_empty_list_says_nothing_matches_with_a_way_back(client, bob, vision):
    JobFactory(owner=bob, team=vision, state=JobState.QUEUED)
    client.force_login(bob)
    page = client.get("/jobs/?scope=mine&state=FAILED").content.decode()
    assert "Submit your first job" not in page
    assert "No job matches these filters" in page
    assert '<a href="/jobs/?scope=mine">Clear the filters</a>' in page
    fragment = client.get("/jobs/?scope=team&state=FAILED", HTTP_HX_REQUEST="true")
    assert "No job matches these filters" in fragment.content.decode()
    assert "Submit your first job" not in fragment.content.decode()


def test_an_empty_list_invites_a_first_submit_only_from_who_may_submit(client, bob, victor):
    client.force_login(bob)
    assert "Submit your first job" in client.get("/jobs/").content.decode()
    client.force_login(victor)
    page = client.get("/jobs/").content.decode()
    assert "No jobs here yet." in page and "Submit your first job" not in page
