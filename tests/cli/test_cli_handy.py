"""The CLI as handy as kubectl (issue 32) against a live portal, over HTTP: a job named by its
name or an id prefix in every command that takes one, ``ls`` in 100 columns, ``events``,
``--watch`` on ``ls`` and ``queue``, the jobs of other teams ahead in ``queue`` and ``show``,
and shell completion of job names and team slugs."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid

import pytest

from portal.models import Job, JobEvent, JobState, JobWait
from tests.cli.conftest import SCRIPT, ctrl_c_as_in_a_terminal, token_for
from tests.clusters.conftest import wait_for
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _id(text: str) -> uuid.UUID:
    return uuid.UUID(text)


def _shown_id(cli, user, ref):
    result = cli(user, "show", ref, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["id"]


# ---------------------------------------------------------------------------------------------
# a job by its name, an id prefix or its id
# ---------------------------------------------------------------------------------------------
def test_a_job_is_named_by_its_name_an_id_prefix_or_its_id(cli, bob, alice, charlie, vision):
    older = JobFactory(owner=bob, team=vision, name="train",
                       public_id=_id("abcdef12-0000-4000-8000-000000000001"))  # fmt: skip
    newer = JobFactory(owner=bob, team=vision, name="train",
                       public_id=_id("abcdef34-0000-4000-8000-000000000002"))  # fmt: skip
    theirs = JobFactory(owner=alice, team=vision, name="alices",
                        public_id=_id("12345678-0000-4000-8000-000000000003"))  # fmt: skip
    hexname = JobFactory(owner=bob, team=vision, name="abcdef")  # a name that reads as a prefix

    assert _shown_id(cli, bob, "train") == str(newer.public_id)  # the newest of that name
    assert _shown_id(cli, bob, "abcdef1") == str(older.public_id)  # a unique prefix
    assert _shown_id(cli, bob, "ABCDEF34-00") == str(newer.public_id)  # any case, dashes too
    assert _shown_id(cli, bob, "123456") == str(theirs.public_id)  # a teammate's, by prefix
    assert _shown_id(cli, bob, str(older.public_id)) == str(older.public_id)
    assert _shown_id(cli, bob, "abcdef") == str(hexname.public_id)  # a name before a prefix

    ambiguous = cli(alice, "show", "abcdef")  # Alice has no job of that name
    assert ambiguous.exit_code == 2, ambiguous.output
    assert "jobs have an id starting 'abcdef'" in ambiguous.stderr
    assert str(older.public_id) in ambiguous.stderr and str(newer.public_id) in ambiguous.stderr
    assert "train" in ambiguous.stderr and ambiguous.stdout == ""

    unknown = cli(bob, "show", "no-such-job")
    assert unknown.exit_code == 3
    assert "none of your jobs is named 'no-such-job'" in unknown.stderr
    short = cli(bob, "show", "abcde")
    assert short.exit_code == 3 and "at least 6 characters" in short.stderr
    assert cli(bob, "show", "alices").exit_code == 3  # a name is one's own
    other_team = cli(charlie, "show", "abcdef12")
    assert other_team.exit_code == 3 and "no job of your teams" in other_team.stderr
    assert cli(charlie, "show", "train").exit_code == 3

    # every command that takes a job: logs, events, estimate, cancel
    assert cli(bob, "logs", "abcdef12").exit_code == 0
    assert cli(bob, "events", "train", "--json").exit_code == 0
    assert cli(bob, "estimate", "nope").exit_code == 3
    cancelled = cli(bob, "cancel", "train", "--reason", "by name", "--json")
    assert cancelled.exit_code == 0, cancelled.output
    assert json.loads(cancelled.stdout)["id"] == str(newer.public_id)
    assert Job.objects.get(pk=newer.pk).state == JobState.CANCELLED
    assert Job.objects.get(pk=older.pk).state == JobState.QUEUED


# ---------------------------------------------------------------------------------------------
# ls in 100 columns
# ---------------------------------------------------------------------------------------------
def test_ls_fits_100_columns_and_wide_shows_everything(cli, bob, vision):
    name = "a-very-long-experiment-name-" + "x" * 40
    reason = "Needs 4 more GPUs than the team may use on a100-80gb: " + "waiting " * 12
    job = JobFactory(owner=bob, team=vision, name=name)
    JobWait.objects.create(job=job, code="QuotaExceeded", reason=reason.strip(), order_key=1)
    JobFactory(owner=bob, team=vision, name="short", state=JobState.RUNNING)

    narrow = cli(bob, "ls")
    assert narrow.exit_code == 0, narrow.output
    lines = narrow.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines), lines
    assert lines[0].split() == ["ID", "NAME", "TEAM", "OWNER", "STATE", "GPUS", "MODEL", "AGE",
                                "REASON"]  # fmt: skip
    row = next(line for line in lines if "a-very-long" in line)
    short_id = row.split()[0]
    assert len(short_id) == 8 and str(job.public_id).startswith(short_id)
    assert name not in row and "\u2026" in row  # cut, and says so
    assert "#1 Needs 4 more GPUs" in row and reason.strip() not in row
    assert _shown_id(cli, bob, short_id) == str(job.public_id)  # what ls shows, show takes

    wide = cli(bob, "ls", "--wide")
    assert wide.exit_code == 0
    row = next(line for line in wide.stdout.splitlines() if "a-very-long" in line)
    assert len(row) > 100
    assert str(job.public_id) in row and name in row and reason.strip() in row
    assert wide.stdout.splitlines()[0].split()[7:] == ["CLUSTER", "SUBMITTED", "REASON"]


# ---------------------------------------------------------------------------------------------
# events
# ---------------------------------------------------------------------------------------------
def test_events_prints_the_jobs_timeline(cli, bob, catalog, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "team: vision\nname: timeline\nimage: nvcr.io/nvidia/pytorch:24.05-py3\n"
        "command: python train.py\nreplicas: 1\ngpus_per_replica: 1\n"
    )
    assert cli(bob, "submit", "-f", str(spec)).exit_code == 0
    job = Job.objects.get(name="timeline")
    JobEvent.objects.create(job=job, created_at=job.submitted_at, from_state=JobState.QUEUED,
                            to_state=JobState.QUEUED, reason="Note",
                            message="A note that is long: " + "words " * 30)  # fmt: skip
    assert cli(bob, "cancel", "timeline", "--reason", "wrong data").exit_code == 0

    result = cli(bob, "events", "timeline")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["TIME", "STATE", "REASON", "BY", "MESSAGE"]
    assert all(len(line) <= 100 for line in lines), lines
    rows = lines[1:]
    assert len(rows) == JobEvent.objects.filter(job=job).count() == 3
    assert rows[0].split()[2:4] == ["QUEUED", "Submitted"]  # after the date and time
    note = next(row for row in rows if "Note" in row)
    assert "QUEUED -> QUEUED" not in note and "\u2026" in note  # one state, message cut
    cancel = rows[-1]
    assert "QUEUED -> CANCELLED" in cancel and "bob" in cancel.split()
    assert "wrong data" in cancel

    wide = cli(bob, "events", str(job.public_id), "--wide").stdout
    assert "words " * 29 in wide
    listed = json.loads(cli(bob, "events", "timeline", "--json").stdout)
    assert [e["to_state"] for e in listed] == ["QUEUED", "QUEUED", "CANCELLED"]
    assert listed[-1]["actor"] == "bob"


# ---------------------------------------------------------------------------------------------
# queue: the jobs of other teams ahead
# ---------------------------------------------------------------------------------------------
def test_queue_and_show_say_how_many_jobs_of_other_teams_are_ahead(
    cli, bob, charlie, vision, language
):
    def queued(owner, team, name, position):
        job = JobFactory(owner=owner, team=team, name=name)
        JobWait.objects.create(job=job, code="QuotaExceeded", reason="Waits.", order_key=position)
        return job

    queued(charlie, language, "l1", 1)
    queued(charlie, language, "l2", 2)
    mine = queued(bob, vision, "mine", 3)
    queued(charlie, language, "l4", 4)
    later = queued(bob, vision, "later", 5)
    JobFactory(owner=bob, team=vision, name="unranked")  # no cycle has looked at it yet

    for args in [(), ("--team", "vision"), ("--sort", "waiting")]:
        result = cli(bob, "queue", *args)
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert lines[0].split()[:5] == ["POS", "OTHERS", "AHEAD", "ID", "NAME"]
        assert all(len(line) <= 100 for line in lines)
        rows = {line.split()[3]: line.split() for line in lines[1:]}
        assert rows["mine"][:3] == ["3", "2", str(mine.public_id)[:8]]
        assert rows["later"][:3] == ["5", "3", str(later.public_id)[:8]]
        assert rows["unranked"][:2] == ["-", "-"]
        assert "l1" not in rows and "l4" not in rows  # other teams' jobs: a number only

    shown = cli(bob, "show", "mine").stdout.splitlines()
    assert "position: 3 (2 jobs of other teams ahead)" in [" ".join(s.split()) for s in shown]
    theirs = cli(charlie, "queue").stdout.splitlines()
    assert {line.split()[3]: line.split()[1] for line in theirs[1:]} == {
        "l1": "0", "l2": "0", "l4": "1",
    }  # fmt: skip


# ---------------------------------------------------------------------------------------------
# --watch
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["ls", "queue"])
def test_watch_redraws_until_ctrl_c(live_server, cli, cli_env, bob, vision, tmp_path, command):
    JobFactory(owner=bob, team=vision, name="first")
    env = {**cli_env, "GPUPOOL_URL": live_server.url, "GPUPOOL_TOKEN": token_for(bob)}
    out = tmp_path / "watch.out"
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [str(SCRIPT), command, "--watch", "--interval", "0.2"],
            env=env,
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=ctrl_c_as_in_a_terminal,
        )
        try:
            header = f"Every 0.2s: gpupool {command}"
            assert wait_for(lambda: header in out.read_text() and "first" in out.read_text())
            JobFactory(owner=bob, team=vision, name="second")
            assert wait_for(lambda: "second" in out.read_text()), out.read_text()
            assert proc.poll() is None  # still watching
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 130
        finally:
            if proc.poll() is None:
                proc.kill()
    draws = out.read_text().split(header)[1:]
    assert len(draws) >= 2
    assert "second" not in draws[0] and "second" in draws[-1]
    assert all(len(line) <= 100 for line in out.read_text().splitlines())

    both = cli(bob, command, "--watch", "--json")
    assert both.exit_code == 2 and "--watch" in both.stderr


# ---------------------------------------------------------------------------------------------
# shell completion
# ---------------------------------------------------------------------------------------------
def test_completion_offers_job_names_ids_and_teams(live_server, gpupool, cli_env, bob, vision):
    job = JobFactory(owner=bob, team=vision, name="train-a",
                     public_id=_id("fedcba98-0000-4000-8000-000000000001"))  # fmt: skip
    JobFactory(owner=bob, team=vision, name="train-a")
    JobFactory(owner=bob, team=vision, name="eval")
    cli_env.update({"GPUPOOL_URL": live_server.url, "GPUPOOL_TOKEN": token_for(bob)})

    def complete(shell, words):
        cli_env["_GPUPOOL_COMPLETE"] = f"{shell}_complete"
        cli_env["COMP_WORDS"] = words
        cli_env["COMP_CWORD"] = str(len(words.split(" ")) - 1)
        result = gpupool()
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert complete("bash", "gpupool show tr").splitlines() == ["plain,train-a"]  # once
    assert sorted(complete("bash", "gpupool logs ").splitlines()) == ["plain,eval",
                                                                     "plain,train-a"]  # fmt: skip
    assert complete("bash", "gpupool cancel fedc").splitlines() == [f"plain,{job.public_id}"]
    assert complete("bash", "gpupool ls --team vi").splitlines() == ["plain,vision"]
    zsh = complete("zsh", "gpupool events tr").splitlines()
    assert zsh[:2] == ["plain", "train-a"] and "QUEUED" in zsh[2]

    cli_env.update({"GPUPOOL_URL": live_server.url, "GPUPOOL_TOKEN": "gpp_not-a-token"})
    assert complete("bash", "gpupool show tr").strip() == ""  # refused: nothing, no error


# ---------------------------------------------------------------------------------------------
# resubmit
# ---------------------------------------------------------------------------------------------
def test_resubmit_by_name_with_changes_and_its_timeline_note(cli, bob, charlie, catalog, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "team: vision\nname: again\nimage: nvcr.io/nvidia/pytorch:24.05-py3\n"
        "command: python train.py --lr 0.1\nreplicas: 2\ngpus_per_replica: 1\n"
    )
    assert cli(bob, "submit", "-f", str(spec)).exit_code == 0
    first = Job.objects.get(name="again")
    assert cli(bob, "cancel", "again").exit_code == 0  # a finished job is resubmitted too

    result = cli(bob, "resubmit", "again", "--set", "replicas=1", "--set", "name=again-small",
                 "--set", "command=python train.py --lr 0.01")  # fmt: skip
    assert result.exit_code == 0, result.output
    second = Job.objects.exclude(pk=first.pk).get()
    assert result.stdout.split() == [str(second.public_id), "again-small", "team", "vision",
                                     "QUEUED"]  # fmt: skip
    assert (second.image, second.replicas) == (first.image, 1)
    assert second.command == ["python", "train.py", "--lr", "0.01"]  # split as a shell would

    timeline = cli(bob, "events", "again-small").stdout.splitlines()
    note = next(line for line in timeline if "Resubmitted" in line)
    assert "QUEUED -> QUEUED" not in note and str(first.public_id)[:8] in note

    assert cli(charlie, "resubmit", str(first.public_id)).exit_code == 3
    assert Job.objects.count() == 2
