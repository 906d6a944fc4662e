"""The installed ``gpupool`` script, as a subprocess, against a live portal (gunicorn for the
whole round, Django's live server for the shorter cases) that runs the job
on kubesim through a real Celery worker: login, ``submit --wait``, ``logs`` and ``logs -f``.

kubesim's clock is frozen; the test moves it (``sim.advance``) while the CLI processes wait.
Its pods write a ``step N:`` line every 10 simulated seconds and run 300 seconds.
"""

from __future__ import annotations

import json
import re
import signal
import stat
import subprocess
import time
from typing import Any

import pytest

from portal.models import Job, JobState
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel, Quota
from tests.cli.conftest import SCRIPT, ctrl_c_as_in_a_terminal, token_for
from tests.clusters.conftest import wait_for, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

JOB_YAML = """\
team: vision
name: cli-train
image: nvcr.io/nvidia/pytorch:24.05-py3
command: python train.py --epochs 1
replicas: 1
gpus_per_replica: 2
gpu_models: [a100-80gb]
"""


def _steps(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"step (\d+):", text)]


@pytest.fixture
def bob_logged_in(live_server, bob, gpupool):
    """``gpupool login`` done as Bob, the token read from stdin."""
    login = gpupool("login", "--url", live_server.url, "--token", "-", input=token_for(bob))
    assert login.returncode == 0, login.stderr
    return bob


def _submit_waiting(cli_env: dict[str, str], *args: str, stdin: Any = None) -> subprocess.Popen:
    """``gpupool submit ... --wait`` started in the background: the test acts while it waits."""
    return subprocess.Popen(
        [str(SCRIPT), "submit", *args, "--wait", "--interval", "0.2"],
        env=cli_env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_as_in_a_terminal,
    )


def test_login_submit_wait_and_logs_through_the_installed_script(
    gunicorn_portal, sim, cluster, watchers, bob, vision, gpupool, cli_env, tmp_path
):
    """The whole round as a user has it: the script against the portal under gunicorn."""
    Quota.objects.create(team=vision, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=8)
    watchers.start(cluster)

    # login: the token from stdin, checked against the portal, saved for the owner only
    token = token_for(bob)
    login = gpupool("login", "--url", gunicorn_portal + "/", "--token", "-", input=token + "\n")
    assert login.returncode == 0, login.stderr
    assert "teams: vision" in login.stdout
    config = tmp_path / "config" / "gpupool" / "config"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert token in config.read_text() and gunicorn_portal in config.read_text()
    whoami = gpupool("whoami")
    assert whoami.returncode == 0 and gunicorn_portal in whoami.stdout
    assert re.search(r"vision\s+member", whoami.stdout), whoami.stdout

    # submit --wait: runs until the job ends; the test plays the scheduler and the clock
    (tmp_path / "job.yaml").write_text(JOB_YAML)
    submit = _submit_waiting(cli_env, "-f", str(tmp_path / "job.yaml"))
    try:
        job = wait_for(lambda: Job.objects.filter(name="cli-train").first())
        assert job is not None, "the CLI's submit never reached the portal"
        assert job.command == ["python", "train.py", "--epochs", "1"]  # split as a shell would
        assert run_cycle().admitted == [job.pk]
        wait_state(job, JobState.SUBMITTED)
        sim.advance(3)
        wait_state(job, JobState.RUNNING)
        sim.advance(50)

        # logs: the lines so far, once
        logs = gpupool("logs", str(job.public_id))
        assert logs.returncode == 0, logs.stderr
        assert _steps(logs.stdout)[:3] == [1, 2, 3]

        # logs -f: follows new lines, none twice, and stops by itself when the job ends
        out = tmp_path / "follow.log"
        with out.open("w") as sink:
            follow = subprocess.Popen(
                [str(SCRIPT), "logs", str(job.public_id), "-f", "--interval", "0.2"],
                env=cli_env,
                stdout=sink,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert wait_for(lambda: 5 in _steps(out.read_text()))
            sim.advance(30)
            assert wait_for(lambda: 8 in _steps(out.read_text())), out.read_text()
            assert follow.poll() is None  # still following a running job
            sim.advance(300)
            wait_state(job, JobState.SUCCEEDED)
            assert follow.wait(timeout=20) == 0, follow.stderr.read() if follow.stderr else ""
        steps = _steps(out.read_text())
        assert steps == list(range(1, steps[-1] + 1)), steps  # each line once, in order
        assert steps[-1] >= 8

        stdout, stderr = submit.communicate(timeout=30)
    finally:
        if submit.poll() is None:
            submit.kill()
    assert submit.returncode == 0, stderr
    assert f"{job.public_id} ended SUCCEEDED" in stdout
    assert "RUNNING" in stderr  # the state changes it followed

    shown = gpupool("show", str(job.public_id), "--json")
    assert shown.returncode == 0
    assert json.loads(shown.stdout)["state"] == JobState.SUCCEEDED
    listed = gpupool("ls", "--state", "SUCCEEDED", "--json")
    assert [j["id"] for j in json.loads(listed.stdout)] == [str(job.public_id)]


def test_submit_wait_exits_1_when_the_job_is_cancelled(
    bob_logged_in, catalog, cli_env, cli, tmp_path
):
    """A job that does not succeed makes ``submit --wait`` exit 1, after telling how it ended;
    the spec comes from stdin here."""
    bob = bob_logged_in
    spec = tmp_path / "doomed.yaml"
    spec.write_text(JOB_YAML.replace("cli-train", "doomed"))
    with spec.open() as stdin:
        proc = _submit_waiting(cli_env, "-f", "-", "--json", stdin=stdin)
    try:
        job = wait_for(lambda: Job.objects.filter(name="doomed").first())
        assert job is not None
        result = cli(bob, "cancel", str(job.public_id), "--reason", "changed my mind")
        assert result.exit_code == 0, result.output
        assert result.stdout.split() == [str(job.public_id), JobState.CANCELLED]
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr
    body = json.loads(stdout)
    assert body["state"] == JobState.CANCELLED and body["cancel_reason"] == "changed my mind"


def test_ctrl_c_stops_waiting_with_130_and_the_job_goes_on(
    bob_logged_in, catalog, cli_env, tmp_path
):
    (tmp_path / "job.yaml").write_text(JOB_YAML.replace("cli-train", "patient"))
    proc = _submit_waiting(cli_env, "-f", str(tmp_path / "job.yaml"))
    try:
        job = wait_for(lambda: Job.objects.filter(name="patient").first())
        assert job is not None
        time.sleep(0.5)  # waiting now
        proc.send_signal(signal.SIGINT)
        _stdout, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert f"the job goes on: gpupool show {job.public_id}" in stderr
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED
