"""Every ``gpupool`` command and exit code against a live portal (HTTP to pytest-django's
``live_server``), run in-process through click's CliRunner: what a person reads in the
tables, what a script reads in ``--json`` and the exit code, and that the API decides.

Exit codes: 0 ok, 1 job failed (--wait, in test_cli_live.py), 2 bad input, 3 not found,
4 refused, 5 server or connection error.
"""

from __future__ import annotations

import json
import socket
import stat
import uuid

import pytest

from portal.jobs.job_templates import builtin_templates_sync
from portal.models import Job, JobState
from scheduling.models import GpuModel, Quota
from tests.conftest import job_body
from tests.dashboards.conftest import kubesim_cluster  # noqa: F401  (fixture)
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spec_file(tmp_path):
    def write(**overrides):
        path = tmp_path / f"job-{uuid.uuid4().hex[:6]}.json"
        path.write_text(json.dumps(job_body(**overrides)))
        return str(path)

    return write


def _submit(cli, user, spec, *args):
    result = cli(user, "submit", "-f", spec, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ---------------------------------------------------------------------------------------------
# submit
# ---------------------------------------------------------------------------------------------
def test_submit_prints_the_job_and_sets_override_the_file(cli, bob, catalog, spec_file):
    result = cli(bob, "submit", "-f", spec_file(), "--set", "replicas=1", "--set", "name=2024")
    assert result.exit_code == 0, result.output
    job = Job.objects.get()
    assert (job.name, job.replicas, job.gpus_per_replica) == ("2024", 1, 4)  # a name stays text
    assert result.stdout.split() == [str(job.public_id), "2024", "team", "vision", "QUEUED"]


def test_bad_input_prints_the_apis_field_errors_exits_2_and_stores_nothing(
    cli, bob, catalog, spec_file
):
    result = cli(bob, "submit", "-f", spec_file(gpus_per_replica=0, image="not an image!"))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "error (400)" in result.stderr
    assert "  gpus_per_replica: " in result.stderr and "  image: " in result.stderr
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [("- a\n- list\n", "must be a mapping"), ("name: [unclosed\n", "not valid YAML or JSON")],
)
def test_an_unreadable_job_file_exits_2_naming_the_file(cli, bob, tmp_path, content, message):
    path = tmp_path / "job.yaml"
    path.write_text(content)
    result = cli(bob, "submit", "-f", str(path))
    assert result.exit_code == 2
    assert str(path) in result.stderr and message in result.stderr
    assert cli(bob, "submit", "-f", str(tmp_path / "missing.yaml")).exit_code == 2
    assert cli(bob, "submit", "--set", "name").exit_code == 2  # neither file nor template
    assert Job.objects.count() == 0


def test_the_same_idempotency_key_returns_the_same_job(cli, bob, catalog, spec_file):
    spec = spec_file()
    first = _submit(cli, bob, spec, "--idempotency-key", "run-42")
    again = _submit(cli, bob, spec, "--idempotency-key", "run-42")
    assert first["id"] == again["id"]
    assert Job.objects.count() == 1
    other = _submit(cli, bob, spec)  # each submit without a key is a new one
    assert other["id"] != first["id"] and Job.objects.count() == 2


def test_submit_from_a_template_with_the_only_team_filled_in(cli, bob, catalog):
    builtin_templates_sync()
    result = cli(bob, "submit", "--template", "gpu-smoke-test", "--set", "name=smoke", "--json")
    assert result.exit_code == 0, result.output
    job = Job.objects.get()
    assert (job.name, job.team.slug, job.command) == ("smoke", "vision", ["nvidia-smi", "-L"])
    assert json.loads(result.stdout)["image"] == "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
    missing = cli(bob, "submit", "--template", "no-such-template")
    assert missing.exit_code == 3 and "no-such-template" in missing.stderr


def test_priority_above_the_teams_policy_is_refused_with_exit_4(cli, bob, catalog, spec_file):
    result = cli(bob, "submit", "-f", spec_file(), "--set", "priority=high")
    assert result.exit_code == 4
    assert "error (403)" in result.stderr and "priority" in result.stderr
    assert Job.objects.count() == 0


# ---------------------------------------------------------------------------------------------
# ls, show, cancel: tenancy and refusals
# ---------------------------------------------------------------------------------------------
def test_ls_filters_as_the_api_and_never_shows_another_teams_jobs(
    cli, bob, alice, charlie, vision, language
):
    mine = JobFactory(owner=bob, team=vision, name="bob-running", state=JobState.RUNNING)
    JobFactory(owner=alice, team=vision, name="alice-queued")
    JobFactory(owner=charlie, team=language, name="charlie-secret")

    table = cli(bob, "ls")
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split()[:5] == ["ID", "NAME", "TEAM", "OWNER", "STATE"]
    assert {line.split()[1] for line in lines[1:]} == {"bob-running", "alice-queued"}
    assert "charlie-secret" not in table.stdout

    mine_only = json.loads(cli(bob, "ls", "--mine", "--json").stdout)
    assert [j["id"] for j in mine_only] == [str(mine.public_id)]
    queued = json.loads(cli(bob, "ls", "--state", "queued", "--json").stdout)
    assert [j["name"] for j in queued] == ["alice-queued"]
    assert json.loads(cli(bob, "ls", "--limit", "1", "--json").stdout)[0]["name"] in {
        "bob-running",
        "alice-queued",
    }
    assert cli(charlie, "ls", "--team", "vision").stdout.strip() == "(none)"
    assert cli(bob, "ls", "--state", "NOPE").exit_code == 2
    running = json.loads(cli(bob, "ls", "--status", "running", "--json").stdout)
    assert [j["name"] for j in running] == ["bob-running"]
    assert json.loads(cli(bob, "ls", "--status", "RESTARTING", "--json").stdout) == []


def test_show_and_not_found(cli, bob, charlie, vision):
    job = JobFactory(owner=bob, team=vision, name="shown")
    result = cli(bob, "show", str(job.public_id))
    assert result.exit_code == 0
    assert "id:" in result.stdout and str(job.public_id) in result.stdout
    assert any(line.split() == ["state:", "QUEUED"] for line in result.stdout.splitlines())
    assert json.loads(cli(bob, "show", str(job.public_id), "--json").stdout)["name"] == "shown"

    for user, job_id in [(bob, str(uuid.uuid4())), (charlie, str(job.public_id))]:
        missing = cli(user, "show", job_id)
        assert missing.exit_code == 3, missing.output
        assert "error (404)" in missing.stderr
    assert cli(charlie, "logs", str(job.public_id)).exit_code == 3


def test_cancel_with_a_reason_and_the_refusals(cli, bob, victor, vision):
    job = JobFactory(owner=bob, team=vision, name="to-cancel")
    viewer = cli(victor, "cancel", str(job.public_id))
    assert viewer.exit_code == 4 and "error (403)" in viewer.stderr
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED

    done = cli(bob, "cancel", str(job.public_id), "--reason", "wrong data", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["cancel_reason"] == "wrong data"
    job.refresh_from_db()
    assert (job.state, job.cancel_reason) == (JobState.CANCELLED, "wrong data")

    again = cli(bob, "cancel", str(job.public_id))
    assert again.exit_code == 4 and "error (409)" in again.stderr


# ---------------------------------------------------------------------------------------------
# queue, quota, usage
# ---------------------------------------------------------------------------------------------
def test_queue_quota_and_usage(cli, bob, vision, catalog):
    queued = JobFactory(owner=bob, team=vision, name="waiting-one")
    Quota.objects.create(team=vision, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=8)

    queue = cli(bob, "queue")
    assert queue.exit_code == 0, queue.output
    assert queue.stdout.splitlines()[0].split()[:5] == ["POS", "OTHERS", "AHEAD", "ID", "NAME"]
    assert str(queued.public_id)[:8] in queue.stdout  # enough of the id to name it
    assert str(queued.public_id) in cli(bob, "queue", "--wide").stdout
    assert [e["id"] for e in json.loads(cli(bob, "queue", "--json").stdout)] == [
        str(queued.public_id)
    ]

    quota = cli(bob, "quota")
    assert quota.exit_code == 0
    assert quota.stdout.splitlines()[1].split()[:3] == ["vision", "a100-80gb", "8"]

    usage = cli(bob, "usage", "--json")
    assert usage.exit_code == 0, usage.output
    assert [r["team"] for r in json.loads(usage.stdout)] == ["vision"]
    assert cli(bob, "usage").exit_code == 0
    bad = cli(bob, "usage", "--since", "yesterday-ish")
    assert bad.exit_code == 2 and "since" in bad.stderr


@pytest.fixture
def east(kubesim_cluster):  # noqa: F811
    """kubesim's small pool (2 x 8 A100 among others) as the cluster ``east``."""
    return kubesim_cluster("east")


def test_estimate_a_spec_and_a_queued_job_with_their_alternatives(
    cli, bob, charlie, vision, east, spec_file
):
    """A spec not yet submitted: when it would start and on what, the alternatives that are
    no sooner in one line, nothing stored; a queued job by its id; another team's job is not
    found."""
    Quota.objects.create(team=vision, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=16)
    a100 = {"gpu_models": ["a100-80gb"], "min_gpu_memory_gib": None}
    spec = spec_file(replicas=1, gpus_per_replica=4, **a100)
    result = cli(bob, "estimate", "-f", spec)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["starts:", "now"]
    assert any(line.startswith("model:") and "A100" in line for line in lines)
    assert any(line.split()[:2] == ["cluster:", "east"] for line in lines)
    # Its only alternative, A100 alone, is no sooner: one line, not a table.
    assert "ALTERNATIVE" not in result.stdout
    assert "no other way to ask starts sooner: NVIDIA A100-SXM4-80GB (now)" in result.stdout
    assert Job.objects.count() == 0  # an estimate stores nothing
    answer = json.loads(cli(bob, "estimate", "-f", spec, "--json").stdout)
    assert answer["estimate"]["model"] == "a100-80gb" and answer["alternatives"]

    queued = _submit(cli, bob, spec_file(replicas=1, gpus_per_replica=4, **a100))
    mine = cli(bob, "estimate", queued["id"], "--json")
    assert mine.exit_code == 0, mine.output
    assert json.loads(mine.stdout)["estimate"]["cluster"] == "east"
    assert cli(charlie, "estimate", queued["id"]).exit_code == 3
    by_name = cli(bob, "estimate", queued["name"], "--json")  # its name names it too
    assert json.loads(by_name.stdout)["estimate"]["cluster"] == "east"
    both = cli(bob, "estimate", queued["id"], "-f", spec)
    assert both.exit_code == 2 and "not both" in both.stderr


def test_tokens_lists_only_my_own_and_marks_the_one_in_use(cli, bob, charlie):
    from portal.tokens import api_token_create, api_token_revoke

    old, _ = api_token_create(user=bob, name="old laptop")
    api_token_revoke(token=old)
    api_token_create(user=charlie, name="charlies-token")
    result = cli(bob, "tokens")
    assert result.exit_code == 0, result.output
    rows = {line[2:].split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert set(rows) == {"cli", "old"}  # "cli test" (the CLI's) and "old laptop"
    assert rows["cli"].startswith("*") and rows["cli"].rstrip().endswith("active")
    assert rows["old"].rstrip().endswith("revoked") and not rows["old"].startswith("*")
    listed = json.loads(cli(bob, "tokens", "--json").stdout)
    assert [t["current"] for t in listed] == [True, False]
    assert all("digest" not in t and len(t["prefix"]) == 12 for t in listed)


# ---------------------------------------------------------------------------------------------
# login and configuration
# ---------------------------------------------------------------------------------------------
def test_login_with_a_refused_token_saves_nothing_and_exits_4(cli, live_server, tmp_path, db):
    result = cli(None, "login", "--url", live_server.url, "--token", "gpp_not-a-real-token")
    assert result.exit_code == 4
    assert "error (401)" in result.stderr
    assert not (tmp_path / "config" / "gpupool" / "config").exists()


def test_login_saves_a_0600_file_that_later_commands_use(cli, live_server, bob, tmp_path):
    from tests.cli.conftest import token_for

    token = token_for(bob)
    result = cli(None, "login", "--url", live_server.url, "--token", token)
    assert result.exit_code == 0, result.output
    path = tmp_path / "config" / "gpupool" / "config"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert cli(None, "ls").exit_code == 0  # no GPUPOOL_* set: the file is read


def test_not_logged_in_exits_2_and_no_server_exits_5(cli, bob):
    missing = cli(None, "ls")
    assert missing.exit_code == 2 and "gpupool login" in missing.stderr
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = cli(bob, "ls", env={"GPUPOOL_URL": f"http://127.0.0.1:{port}"})
    assert down.exit_code == 5 and "cannot reach" in down.stderr
    assert cli(bob, "ls", env={"GPUPOOL_URL": "ftp://example"}).exit_code == 2


# ---------------------------------------------------------------------------------------------
# help and completion
# ---------------------------------------------------------------------------------------------
COMMANDS = ["login", "submit", "resubmit", "ls", "show", "events", "logs", "cancel", "queue",
            "quota", "usage", "tokens", "whoami", "completion", "port-forward"]  # fmt: skip


def test_every_command_has_help_with_an_example(cli):
    top = cli(None, "--help")
    assert top.exit_code == 0
    for name in COMMANDS:
        assert name in top.stdout
        result = cli(None, name, "--help")
        assert result.exit_code == 0, name
        assert "Example" in result.stdout, name


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(cli, shell):
    result = cli(None, "completion", shell)
    assert result.exit_code == 0
    assert "_GPUPOOL_COMPLETE" in result.stdout


def test_ls_show_and_the_api_say_restarting_for_a_running_job_whose_pods_wait_again(
    cli,
    bob,
    vision,
    kubesim_cluster,  # noqa: F811
):
    """The CLI shows the job's status as the page does: RUNNING for the books, RESTARTING
    while its Volcano Job is Pending again after a restart, with what stopped its pods."""
    from django.utils import timezone

    from clusters.models import VolcanoJobRecord

    cluster = kubesim_cluster("east")
    job = JobFactory(owner=bob, team=vision, name="restarts", state=JobState.RUNNING,
                     cluster=cluster, max_retry=2)  # fmt: skip
    VolcanoJobRecord.objects.create(
        job=job, cluster=cluster, namespace="gpupool", name="gp-restarts", submission_uid="u",
        phase="Pending", created_at=timezone.now(),
        pods={"0": {"pod": "p-0", "node": "", "phase": "Pending",
                    "problem": "unschedulable: 1 node(s) had untolerated taint"}},
    )  # fmt: skip
    row = next(line for line in cli(bob, "ls").stdout.splitlines() if "restarts" in line)
    assert "RESTARTING" in row.split() and "RUNNING" not in row.split()
    shown = cli(bob, "show", str(job.public_id)).stdout.splitlines()
    assert any(line.split() == ["state:", "RESTARTING"] for line in shown)
    reason = next(line for line in shown if line.startswith("reason:"))
    assert "wait to be placed again" in reason and "untolerated taint" in reason
    data = json.loads(cli(bob, "show", str(job.public_id), "--json").stdout)
    assert (data["state"], data["status"]) == ("RUNNING", "RESTARTING")
    VolcanoJobRecord.objects.filter(job=job).update(phase="Running")
    shown = cli(bob, "show", str(job.public_id)).stdout.splitlines()
    assert any(line.split() == ["state:", "RUNNING"] for line in shown)
    assert not any(line.startswith("reason:") for line in shown)
