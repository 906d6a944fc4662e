"""Pod logs on the job page and over REST, for the job's team only."""

from __future__ import annotations

import pytest

from portal.models import JobState
from tests.clusters.conftest import dispatch, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


@pytest.fixture
def running(sim, cluster, admit, watchers):
    watchers.start(cluster)
    job = admit(cluster, replicas=2, gpus_per_replica=1)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    sim.advance(3)
    wait_state(job, JobState.RUNNING)
    sim.advance(40)  # kubesim writes a log line every 10 simulated seconds
    return job


def test_a_team_member_reads_the_last_lines_of_a_replica(running, api_as, bob, alice):
    answer = api_as(alice).get(f"/api/v1/jobs/{running.public_id}/logs/?replica=1&tail=2")
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["available"] and body["pod"].endswith("-worker-0")
    assert len(body["text"].strip().splitlines()) == 2


def test_another_team_gets_a_404_and_a_bad_replica_a_400(running, api_as, charlie, bob):
    assert api_as(charlie).get(f"/api/v1/jobs/{running.public_id}/logs/").status_code == 404
    answer = api_as(bob).get(f"/api/v1/jobs/{running.public_id}/logs/?replica=5")
    assert answer.status_code == 400 and "replica" in answer.json()["extra"]["fields"]


def test_a_job_not_started_yet_says_so(cluster, admit, api_as, bob):
    job = admit(cluster)
    body = api_as(bob).get(f"/api/v1/jobs/{job.public_id}/logs/").json()
    assert not body["available"] and "not been started" in body["message"]


def test_the_job_page_loads_the_log_section(running, client, bob):
    client.force_login(bob)
    page = client.get(f"/jobs/{running.public_id}/").content.decode()
    assert f"/clusters/job-logs/{running.public_id}/" in page
    fragment = client.get(
        f"/clusters/job-logs/{running.public_id}/?replica=0&tail=3", HTTP_HX_REQUEST="true"
    ).content.decode()
    assert 'id="job-logs"' in fragment and "<pre" in fragment and "<html" not in fragment
