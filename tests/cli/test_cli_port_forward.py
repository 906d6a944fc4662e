"""``gpupool port-forward`` (issue 32): an inference job's server called on a local port, through
the portal's ``/api/v1/jobs/{id}/proxy/{path}`` and the cluster API server's service proxy, on
kubesim through the real client. The job is dispatched by a real Celery worker and followed
by the watch; kubesim's pods answer as a small OpenAI-compatible server once Ready.

Then who may: a member (and the CLI with their token) yes; another team's member, a platform
admin outside the team: 404; a viewer: 403; a browser's session: never (API tokens only).
And what is refused: a job that is not running, one that serves nothing, a path with ``..``.
"""

from __future__ import annotations

import re
import signal
import subprocess
from typing import Any

import pytest
import requests

from portal.models import Job, JobState
from tests.cli.conftest import SCRIPT, ctrl_c_as_in_a_terminal, token_for
from tests.clusters.conftest import dispatch, wait_for, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]

NS = "gpupool"


def _serving_job(sim: Any, cluster: Any, admit: Any, watchers: Any, *, ready: bool = True) -> Job:
    """An inference job RUNNING on kubesim, its one replica Ready (or not yet)."""
    watchers.start(cluster)
    job = admit(
        cluster,
        name="llama-serve",
        kind="inference",
        port=8000,
        readiness_path="/health",
        gpus_per_replica=1,
        image="vllm/vllm-openai:v0.6.0",
        command=["sh", "-c", "sleep 600"],
    )
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    assert wait_for(lambda: Job.objects.get(pk=job.pk).endpoint_url)
    sim.advance(2.2)  # podStartupSeconds: running, its readiness probe not passed yet
    wait_state(job, JobState.RUNNING)
    if ready:
        sim.advance(1.5)
        assert wait_for(lambda: Job.objects.get(pk=job.pk).endpoint_ready)
    return Job.objects.get(pk=job.pk)


def _proxy(live_server: Any, job: Job, token: str, path: str, **kwargs: Any) -> Any:
    method = kwargs.pop("method", "GET")
    return requests.request(
        method,
        f"{live_server.url}/api/v1/jobs/{job.public_id}/proxy/{path}",
        headers={"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})},
        timeout=30,
        **kwargs,
    )


def test_port_forward_calls_the_job_s_server_on_a_local_port(
    live_server, sim, cluster, admit, watchers, bob, cli_env
):
    _serving_job(sim, cluster, admit, watchers)
    env = {**cli_env, "GPUPOOL_URL": live_server.url, "GPUPOOL_TOKEN": token_for(bob)}
    forward = subprocess.Popen(
        [str(SCRIPT), "port-forward", "llama-serve", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_as_in_a_terminal,
    )
    try:
        assert forward.stderr is not None
        first = forward.stderr.readline()
        found = re.search(
            r"Forwarding http://127\.0\.0\.1:(\d+) -> job llama-serve port 8000", first
        )
        assert found, first
        local = f"http://127.0.0.1:{found.group(1)}"

        models = requests.get(f"{local}/v1/models", timeout=30)
        assert models.status_code == 200
        assert models.headers["Content-Type"] == "application/json"
        assert models.json()["data"][0]["id"] == "vllm-openai"

        completion = requests.post(
            f"{local}/v1/completions", json={"prompt": "Hello", "max_tokens": 4}, timeout=30
        )
        assert completion.status_code == 200
        assert completion.json()["choices"][0]["text"] == "echo: Hello"
        chat = requests.post(
            f"{local}/v1/chat/completions?stream=false",
            json={"messages": [{"role": "user", "content": "Hi there"}]},
            timeout=30,
        )
        assert chat.json()["choices"][0]["message"]["content"] == "echo: Hi there"
        assert requests.get(f"{local}/health", timeout=30).json() == {"status": "ok"}
        missing = requests.get(f"{local}/no/such/route", timeout=30)
        assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}
    finally:
        forward.send_signal(signal.SIGINT)
        _out, err = forward.communicate(timeout=30)
    assert forward.returncode == 130
    assert "POST /v1/completions -> 200" in err and "GET /no/such/route -> 404" in err


def test_the_proxy_relays_the_server_s_answer_sandboxed_and_says_when_it_is_not_ready(
    live_server, sim, cluster, admit, watchers, bob
):
    job = _serving_job(sim, cluster, admit, watchers, ready=False)
    token = token_for(bob)
    not_ready = _proxy(live_server, job, token, "v1/models")
    assert not_ready.status_code == 503
    assert "not ready" in not_ready.json()["message"]
    assert "no endpoints available" in not_ready.json()["message"]

    sim.advance(1.5)
    assert wait_for(lambda: Job.objects.get(pk=job.pk).endpoint_ready)
    answer = _proxy(live_server, job, token, "v1/completions", method="POST", json={"prompt": "x"})
    assert answer.status_code == 200 and answer.json()["choices"][0]["text"] == "echo: x"
    # whatever the server answers never runs as the portal's page
    assert answer.headers["Content-Security-Policy"].startswith("sandbox")
    root = _proxy(live_server, job, token, "")
    assert root.status_code == 404 and root.json() == {"detail": "Not Found"}
    bad = _proxy(
        live_server,
        job,
        token,
        "v1/completions",
        method="POST",
        data=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert bad.status_code == 400 and "body" in bad.json()["extra"]["fields"]


def test_only_members_and_admins_of_the_team_call_the_server(
    live_server, sim, cluster, admit, watchers, bob, alice, charlie, victor, root, client
):
    job = _serving_job(sim, cluster, admit, watchers)
    assert _proxy(live_server, job, token_for(alice), "health").status_code == 200
    other_team = _proxy(live_server, job, token_for(charlie), "health")
    assert other_team.status_code == 404 and other_team.json()["message"] == "Job not found."
    assert _proxy(live_server, job, token_for(root), "health").status_code == 404
    viewer = _proxy(live_server, job, token_for(victor), "health")
    assert viewer.status_code == 403 and "viewer" in viewer.json()["message"]
    # a cluster whose RBAC does not grant the portal services/proxy: a 502 that says so
    sim.faults.add(
        verb="get",
        resource="services/proxy",
        status=403,
        message='services "x" is forbidden: cannot get resource "services/proxy"',
    )
    refused = _proxy(live_server, job, token_for(alice), "health")
    assert refused.status_code == 502
    assert "needs services/proxy in the job's namespace" in refused.json()["message"]
    # a browser's session never reaches it: API tokens only
    client.force_login(bob)
    assert client.get(f"/api/v1/jobs/{job.public_id}/proxy/health").status_code == 401


def test_a_path_that_climbs_out_is_refused(live_server, sim, cluster, admit, watchers, bob, client):
    job = _serving_job(sim, cluster, admit, watchers)
    token = token_for(bob)
    climbing = client.get(
        f"/api/v1/jobs/{job.public_id}/proxy/v1/../../pods", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert climbing.status_code == 400 and "path" in climbing.json()["extra"]["fields"]


def test_a_job_that_does_not_run_or_serves_nothing_is_refused(
    live_server, cluster, admit, bob, cli
):
    training = admit(cluster, name="train-1", gpus_per_replica=1)
    queued = admit(cluster, name="serve-later", kind="inference", port=8000, gpus_per_replica=1)
    Job.objects.filter(pk=queued.pk).update(state=JobState.QUEUED, cluster=None)
    token = token_for(bob)
    serves_nothing = _proxy(live_server, training, token, "health")
    assert (
        serves_nothing.status_code == 409 and "serves nothing" in serves_nothing.json()["message"]
    )
    waiting = _proxy(live_server, queued, token, "health")
    assert waiting.status_code == 409 and "QUEUED" in waiting.json()["message"]

    refused = cli(bob, "port-forward", "train-1")
    assert refused.exit_code == 2 and "not an inference job" in refused.stderr
