"""Submitting: ``submit`` (a spec file, a template, --set overrides), ``resubmit``,
``estimate``, and ``--wait``'s follow-up to the job's end (its exit code says how it ended)."""

from __future__ import annotations

import shlex
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import click
import yaml

from gpupool_cli.api import EXIT_BAD_INPUT, EXIT_JOB_FAILED, EXIT_NOT_FOUND, EXIT_OK, ApiError
from gpupool_cli.app import (
    TERMINAL_STATES,
    cli,
    client,
    complete_job,
    complete_team,
    job_ref,
    json_option,
)
from gpupool_cli.output import emit_json, pairs, table, when

LIST_FIELDS = {"command", "args"}  # a string here is split as a shell would


TEXT_FIELDS = {"name", "image", "team"}  # --set keeps these as typed


def _spec_file(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ApiError(f"{path}: {error.strerror}", EXIT_BAD_INPUT) from error
    try:
        data = yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as error:
        raise ApiError(f"{path}: not valid YAML or JSON: {error}", EXIT_BAD_INPUT) from error
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ApiError(f"{path}: must be a mapping of the job's fields", EXIT_BAD_INPUT)
    return data


def _set(body: dict[str, Any], assignment: str) -> None:
    """``key=value``, the value read as YAML (2, true, [a, b]); ``env.NAME=value`` sets one
    entry of a mapping field."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ApiError(f"--set {assignment!r}: expected key=value", EXIT_BAD_INPUT)
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    if key.split(".")[-1] in TEXT_FIELDS or key.startswith("env."):
        value = raw  # never turn a name like 2024 or "on" into a number or a boolean
    *parents, last = key.split(".")
    target = body
    for part in parents:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ApiError(f"--set {key}: {part} is not a mapping", EXIT_BAD_INPUT)
    target[last] = value


def _template(name: str) -> dict[str, Any]:
    templates = client().get("templates/")
    found = [t for t in templates if name in (t.get("name"), t.get("key"), str(t.get("id")))]
    if not found:
        raise ApiError(
            f"template: no template named {name!r} (see the portal's /templates/)", EXIT_NOT_FOUND
        )
    if len(found) > 1:
        choices = ", ".join(f"{t['id']} ({t['scope']} {t.get('team') or ''})" for t in found)
        raise ApiError(
            f"template: {len(found)} templates are named {name!r}; give one's id: {choices}",
            EXIT_BAD_INPUT,
        )
    return dict(found[0].get("spec") or {})


def _only_team() -> str | None:
    teams = client().get("teams/")
    return teams[0]["slug"] if len(teams) == 1 else None


def job_wait(job_id: str, interval: float, quiet: bool) -> dict[str, Any]:
    """Poll the job until it ends, telling each change of its status (RESTARTING included,
    with its reason) on stderr."""
    state = None
    while True:
        try:
            job: dict[str, Any] = client().get(f"jobs/{job_id}/")
        except KeyboardInterrupt:
            click.echo(f"\nstopped waiting; the job goes on: gpupool show {job_id}", err=True)
            raise
        status = job.get("status") or job["state"]
        if status != state:
            state = status
            if not quiet:
                reason = job.get("status_reason") or (
                    job.get("pending_reason") if state == "QUEUED" else ""
                )
                click.echo(f"{job_id}: {state}" + (f" ({reason})" if reason else ""), err=True)
        if job["state"] in TERMINAL_STATES:
            return job
        try:
            time.sleep(interval)
        except KeyboardInterrupt:
            click.echo(f"\nstopped waiting; the job goes on: gpupool show {job_id}", err=True)
            raise


def _job_outcome(job: dict[str, Any]) -> int:
    return EXIT_OK if job["state"] == "SUCCEEDED" else EXIT_JOB_FAILED


def _apply_sets(body: dict[str, Any], sets: tuple[str, ...]) -> None:
    """Each --set onto ``body``; a command or args given as a string split as a shell would."""
    for assignment in sets:
        _set(body, assignment)
    for field in LIST_FIELDS:
        if isinstance(body.get(field), str):
            body[field] = shlex.split(body[field])


def _post_and_follow(
    body: dict[str, Any], idempotency_key: str | None, wait: bool, interval: float, as_json: bool
) -> None:
    """POST ``body`` as a job (submit, resubmit), say what was made, and with ``wait`` follow
    it to its end, exiting 1 unless it SUCCEEDED."""
    key = idempotency_key or f"cli-{uuid.uuid4()}"
    job = client().post("jobs/", body, idempotency_key=key)
    if not as_json:
        click.echo(f"{job['id']}  {job['name']}  team {job['team']}  {job['state']}")
    if wait:
        job = job_wait(job["id"], interval, quiet=as_json)
        if not as_json:
            tail = f": {job['pending_reason']}" if job.get("pending_reason") else ""
            click.echo(f"{job['id']} ended {job['state']}{tail}")
    if as_json:
        emit_json(job)
    if wait:
        click.get_current_context().exit(_job_outcome(job))


def _job_body(
    path: str | None, sets: tuple[str, ...], template: str | None, team: str | None
) -> dict[str, Any]:
    """A job's REST fields from a template, a file and --set, later sources winning (what
    submit sends, and estimate asks about)."""
    if not path and not template:
        raise click.UsageError("give a job file (-f job.yaml), a --template, or both")
    body: dict[str, Any] = _template(template) if template else {}
    if path:
        body.update(_spec_file(path))
    _apply_sets(body, sets)
    if team:
        body["team"] = team
    if not body.get("team"):
        only = _only_team()
        if only:
            body["team"] = only
    return body


@cli.command()
@click.option(
    "-f", "--file", "path", metavar="PATH", help="YAML or JSON with the REST fields; - for stdin."
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a field (repeatable); the value is read as YAML.",
)
@click.option("--template", metavar="NAME", help="Start from a template (its name, key or id).")
@click.option(
    "--team",
    help="Team slug (default: the file's, or your only team).",
    shell_complete=complete_team,
)
@click.option("--wait", is_flag=True, help="Follow the job to its end; exit 1 unless it SUCCEEDED.")
@click.option(
    "--interval", default=5.0, show_default=True, metavar="SECONDS", help="How often --wait asks."
)
@click.option(
    "--idempotency-key",
    metavar="KEY",
    help="Repeat a submit safely (default: a new random key, reused by this run's retries).",
)
@json_option
def submit(
    path: str | None,
    sets: tuple[str, ...],
    template: str | None,
    team: str | None,
    wait: bool,
    interval: float,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Submit a job: the fields of POST /api/v1/jobs/, from a file, a template and --set.

    Later sources win: the template's spec, then the file, then each --set. `command` and
    `args` may be a string, split as a shell would. The submit carries an Idempotency-Key,
    so a retry after a lost answer returns the same job, never a second one.

    \b
    Example (job.yaml):
      name: resnet50
      team: vision
      image: nvcr.io/nvidia/pytorch:24.05-py3
      command: torchrun train.py --epochs 10
      replicas: 2
      gpus_per_replica: 4
      min_gpu_memory_gib: 40
    \b
      gpupool submit -f job.yaml --set replicas=1 --wait
      gpupool submit --template "GPU smoke test" --set name=smoke --team vision
    """
    _post_and_follow(
        _job_body(path, sets, template, team), idempotency_key, wait, interval, as_json
    )


@cli.command()
@click.argument("job_id", metavar="JOB", shell_complete=complete_job)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change a field (repeatable); the value is read as YAML.",
)
@click.option("--wait", is_flag=True, help="Follow the job to its end; exit 1 unless it SUCCEEDED.")
@click.option(
    "--interval", default=5.0, show_default=True, metavar="SECONDS", help="How often --wait asks."
)
@click.option(
    "--idempotency-key",
    metavar="KEY",
    help="Repeat a resubmit safely (default: a new random key, reused by this run's retries).",
)
@json_option
def resubmit(
    job_id: str,
    sets: tuple[str, ...],
    wait: bool,
    interval: float,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Submit a job again as it was asked for, with --set changes (the web's Resubmit).

    The portal copies the job's request (POST /api/v1/jobs/ with from_job) and notes on the
    new job's timeline which job it came from. JOB is a job's id, its name (your newest job so
    named) or 6+ characters of its id: any job of your teams, finished or not.

    \b
    Example:
      gpupool resubmit resnet50
      gpupool resubmit 3f9c2f --set replicas=1 --set name=resnet50-small --wait
    """
    body: dict[str, Any] = {"from_job": job_ref(job_id)}
    _apply_sets(body, sets)
    _post_and_follow(body, idempotency_key, wait, interval, as_json)


@cli.command()
@click.argument("job_id", metavar="[JOB]", required=False, shell_complete=complete_job)
@click.option(
    "-f", "--file", "path", metavar="PATH", help="YAML or JSON with the REST fields; - for stdin."
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a field (repeatable).")
@click.option("--template", metavar="NAME", help="Start from a template (its name, key or id).")
@click.option(
    "--team",
    help="Team slug (default: the file's, or your only team).",
    shell_complete=complete_team,
)
@json_option
def estimate(
    job_id: str | None,
    path: str | None,
    sets: tuple[str, ...],
    template: str | None,
    team: str | None,
    as_json: bool,
) -> None:
    """When a job would start, on which model and cluster, and what could start sooner.

    For a job not yet submitted, the same fields as submit (nothing is stored); for a queued
    job, its id, name or id prefix. Each alternative (another model it allows, fewer
    replicas) is simulated on the queue as it is now: an estimate, not a promise.

    \b
    Example:
      gpupool estimate -f job.yaml
      gpupool estimate -f job.yaml --set replicas=2
      gpupool estimate resnet50          # a queued job: its name, id or id prefix
    """
    if job_id and (path or template or sets):
        raise click.UsageError("give a queued job, or a job spec (-f/--template), not both")
    if job_id:
        answer = client().get(f"jobs/{job_ref(job_id)}/estimate/")
    else:
        answer = client().post("jobs/estimate/", _job_body(path, sets, template, team))
    if as_json:
        emit_json(answer)
        return
    best = answer.get("estimate")
    if best:
        pairs(
            [
                ("starts", best.get("summary") or best.get("starts") or when(best.get("start_at"))),
                ("most likely", when(best.get("start_at"))),
                ("model", best.get("model_name") or best.get("model")),
                ("cluster", best.get("cluster")),
                ("why", best.get("why")),
            ]
        )
    else:
        click.echo(f"no estimate: {answer.get('why') or 'the portal gave no reason'}")
    alternatives = answer.get("alternatives") or []
    sooner = [a for a in alternatives if a.get("sooner")]
    if sooner:
        click.echo("\nasked differently, it could start sooner:")
        table(
            sooner,
            [
                ("ALTERNATIVE", lambda a: a.get("label")),
                ("STARTS", lambda a: a.get("starts") or "no estimate"),
                ("MODEL", lambda a: a.get("model")),
                ("CLUSTER", lambda a: a.get("cluster")),
            ],
        )
    rest = [a for a in alternatives if not a.get("sooner")]
    if rest:  # no better: one line, so the table shows only what would help
        said = ", ".join(f"{a.get('label')} ({a.get('starts') or 'no estimate'})" for a in rest)
        click.echo(f"\n{'not sooner' if sooner else 'no other way to ask starts sooner'}: {said}")
