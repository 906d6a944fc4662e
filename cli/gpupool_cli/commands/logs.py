"""Following a running job: ``logs`` (tail, --follow, a previous run) and ``port-forward``
(a local port relayed to an inference job's endpoint through the portal)."""

from __future__ import annotations

import time
from typing import Any

import click

from gpupool_cli.api import EXIT_BAD_INPUT, EXIT_REFUSED, ApiError
from gpupool_cli.app import TERMINAL_STATES, cli, client, complete_job, job_ref
from gpupool_cli.forward import forward_server


@cli.command()
@click.argument("job_id", metavar="JOB", shell_complete=complete_job)
@click.option(
    "--replica", default=0, show_default=True, type=click.IntRange(0), help="0-based replica."
)
@click.option(
    "--tail", type=click.IntRange(1), help="The last N lines (the API's default when omitted)."
)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("--timestamps", is_flag=True, help="Prefix each line with its time.")
@click.option("--previous", is_flag=True, help="The run before the container last restarted.")
@click.option(
    "--interval", default=3.0, show_default=True, metavar="SECONDS", help="How often --follow asks."
)
def logs(
    job_id: str,
    replica: int,
    tail: int | None,
    follow: bool,
    timestamps: bool,
    previous: bool,
    interval: float,
) -> None:
    """Print a replica's log; -f follows it until the job ends.

    Following reads after the last line's cursor (the API's next_since), so no line is
    printed twice. JOB is a job's id, its name (your newest job so named) or 6+ characters of
    its id.

    \b
    Example:
      gpupool logs resnet50 --replica 1 --tail 100
      gpupool logs 3f9c2f -f
    """
    job_id = job_ref(job_id)
    params: dict[str, Any] = {
        "replica": replica,
        "tail": tail,
        "timestamps": "true" if timestamps else None,
        "attempt": "previous" if previous else None,
    }
    since = ""
    told = ""
    while True:
        answer = client().get(f"jobs/{job_id}/logs/", {**params, "since": since or None})
        if answer.get("text"):
            text = answer["text"]
            click.echo(text, nl=not text.endswith("\n"))
        elif not answer.get("available") and answer.get("message") != told:
            told = answer.get("message") or ""
            click.echo(told, err=True)
        since = answer.get("next_since") or since
        if not follow or not answer.get("running"):
            return
        time.sleep(interval)


@cli.command("port-forward")
@click.argument("job_id", metavar="JOB", shell_complete=complete_job)
@click.argument("local_port", metavar="[LOCAL_PORT]", required=False, type=click.IntRange(0, 65535))
@click.option(
    "--address",
    default="127.0.0.1",
    show_default=True,
    help="The local address to listen on (0.0.0.0: every interface; anyone who reaches it "
    "calls the server as you).",
)
def port_forward(job_id: str, local_port: int | None, address: str) -> None:
    """Call an inference job's server on a local port, through the portal.

    Each HTTP request to http://127.0.0.1:LOCAL_PORT/PATH goes to the job's server as
    PATH, through the portal (with your token: members and admins of the job's team only)
    and the cluster's API server, so it works wherever the portal does, without a route to
    the cluster. LOCAL_PORT defaults to the job's own port, 0 picks a free one. Runs until
    Ctrl-C. HTTP only (not a raw TCP tunnel); answers are relayed whole, not streamed.

    \b
    Example:
      gpupool port-forward llama-serve 8000 &
      curl -s localhost:8000/v1/models
      curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \\
           -d '{"prompt": "Hello"}'
    """
    found = job_ref(job_id)
    job = client().get(f"jobs/{found}/")
    if job.get("kind") != "inference" or not job.get("port"):
        raise ApiError(
            f"{job['name']}: not an inference job with a port; nothing to forward to",
            EXIT_BAD_INPUT,
        )
    if job["state"] in TERMINAL_STATES:
        raise ApiError(
            f"{job['name']} has ended ({job['state']}); its server is gone", EXIT_REFUSED
        )
    port = job["port"] if local_port is None else local_port
    try:
        server = forward_server(
            client(), found, address, port, say=lambda text: click.echo(text, err=True)
        )
    except OSError as error:
        raise ApiError(
            f"local_port: cannot listen on {address}:{port}: {error.strerror}", EXIT_BAD_INPUT
        ) from error
    bound = server.server_address[1]
    click.echo(
        f"Forwarding http://{address}:{bound} -> job {job['name']} port {job['port']} "
        "(through the portal); Ctrl-C stops",
        err=True,
    )
    endpoint = job.get("endpoint") or {}
    if job["state"] != "RUNNING" or not endpoint.get("ready"):
        click.echo(
            f"{job['name']} is {job.get('status') or job['state']}, not serving yet: requests "
            "answer 409 or 503 until it is",
            err=True,
        )
    try:
        server.serve_forever()
    finally:
        server.server_close()
