"""The ``gpupool`` commands. Each one is a thin reading of one REST operation: the portal
decides everything (validation, tenancy, quotas), the CLI only shapes requests and answers.

Exit codes (``docs/cli.md``): 0 ok, 1 the job ended FAILED or CANCELLED (``submit --wait``),
2 bad input (the API's field errors are printed), 3 not found, 4 refused (401, 403, 409, 429),
5 server or connection error, 130 stopped with Ctrl-C.

The group and what the commands share live in :mod:`gpupool_cli.app`, the commands by area in
:mod:`gpupool_cli.commands`; this module puts them together and is the console script's entry.
"""

from __future__ import annotations

# Importing the command modules registers their commands on the group.
from gpupool_cli.app import cli
from gpupool_cli.commands import account, jobs, logs, pool, submit

__all__ = ["account", "cli", "jobs", "logs", "main", "pool", "submit"]


def main() -> None:
    """The console script's entry point."""
    cli(prog_name="gpupool")
