"""Pod logs on the job page and over REST, for the job's team only."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from portal.models import JobState
from tests.clusters.conftest import dispatch, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


@pytest.fixture
def running(sim, cluster, admit, watchers):
    watchers.start(cluster)
    job = admit(cluster, replicas=2, gpus_per_replica=1, command=["sh", "-c", "sleep 600"])
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


def _steps(text: str) -> list[int]:
    return [
        int(line.split("step ")[1].split(":")[0]) for line in text.splitlines() if "step " in line
    ]


def test_reading_after_a_cursor_returns_only_the_new_lines(running, api_as, bob, sim):
    """How the page follows a log and a CLI tails it: read, then read ``since`` the answer's
    ``next_since`` for only what came after; ``running`` says more may come."""
    api = api_as(bob)
    url = f"/api/v1/jobs/{running.public_id}/logs/?replica=1"
    first = api.get(f"{url}&timestamps=true").json()
    lines = first["text"].splitlines()
    assert first["running"] and first["attempt"] == "current"
    assert first["next_since"] == lines[-1].split(" ")[0] and "Z" in first["next_since"]
    cursor = quote(first["next_since"])
    nothing = api.get(f"{url}&since={cursor}").json()
    assert nothing["text"] == "" and nothing["next_since"] == first["next_since"]
    sim.advance(30)  # a line every 10 simulated seconds
    more = api.get(f"{url}&since={cursor}").json()
    last = _steps(first["text"])[-1]
    new = len(more["text"].splitlines())
    assert new >= 2 and _steps(more["text"]) == list(range(last + 1, last + 1 + new))
    assert more["next_since"] > first["next_since"]
    # the cluster's clock now runs minutes ahead of the portal's: the read still joins up
    sim.advance(200)
    later = api.get(f"{url}&since={quote(more['next_since'])}").json()
    last = _steps(more["text"])[-1]
    assert _steps(later["text"]) == list(range(last + 1, last + 21))


def test_since_a_duration_the_previous_run_and_bad_input(running, api_as, bob):
    api = api_as(bob)
    url = f"/api/v1/jobs/{running.public_id}/logs/"
    recent = api.get(f"{url}?since=15s").json()
    assert 1 <= len(recent["text"].splitlines()) <= 2
    previous = api.get(f"{url}?attempt=previous").json()
    assert not previous["available"] and "has not restarted" in previous["message"]
    for query, field in (("since=yesterday", "since"), ("attempt=first", "attempt"),
                         ("timestamps=maybe", "timestamps")):  # fmt: skip
        answer = api.get(f"{url}?{query}")
        assert answer.status_code == 400 and field in answer.json()["extra"]["fields"], query


def test_the_whole_log_downloads_as_a_file_for_the_team_only(running, client, bob, charlie):
    client.force_login(bob)
    url = f"/clusters/job-logs/{running.public_id}/download/?replica=1&timestamps=1"
    response = client.get(url)
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="')
    assert response["Content-Disposition"].endswith('-replica-1.log"')
    text = b"".join(response.streaming_content).decode()
    assert text.splitlines()[0].split(" ")[0].endswith("Z")  # timestamps asked for
    shown = client.get(
        f"/clusters/job-logs/{running.public_id}/?replica=1&tail=2", HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "2 lines shown" in shown
    assert len(text.splitlines()) > 2 and "kubesim: container" in text
    client.force_login(charlie)
    assert client.get(url).status_code == 404


def test_the_previous_run_is_offered_only_for_a_replica_that_restarted(
    running, client, bob, watchers
):
    """The kubelet keeps a previous run's log only for a container that restarted in place:
    the page offers it for such a replica (as the watch recorded it), not for the others."""
    from clusters.models import VolcanoJobRecord

    watchers.stop()  # what follows stands for what the watch records of a restart
    record = VolcanoJobRecord.objects.get(job_id=running.pk)
    pods = dict(record.pods)
    pods["1"] = {**pods.get("1", {}), "restarts": 2}
    VolcanoJobRecord.objects.filter(pk=record.pk).update(pods=pods)
    client.force_login(bob)

    def fragment(replica: int) -> str:
        return client.get(
            f"/clusters/job-logs/{running.public_id}/?replica={replica}", HTTP_HX_REQUEST="true"
        ).content.decode()

    assert "previous (before the container restarted)" not in fragment(0)
    assert 'id="log-attempt"' not in fragment(0)  # one run only: no choice to offer
    assert "previous (before the container restarted)" in fragment(1)


def test_a_pods_restarts_are_read_from_its_containers():
    from clusters.observed import pod_view

    pod = {
        "metadata": {
            "name": "gp-x-master-0",
            "uid": "u1",
            "labels": {
                "app.kubernetes.io/managed-by": "gpupool",
                "gpupool.dev/job-id": "0f8fad5b-d9cb-469f-a165-70867728950e",
                "volcano.sh/task-spec": "master",
                "volcano.sh/task-index": "0",
            },
        },
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"restartCount": 2}, {"restartCount": 1}],
        },
    }
    view = pod_view(pod)
    assert view is not None and view.restarts == 3
