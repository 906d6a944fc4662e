"""The ``gpupool`` CLI against a live portal: pytest-django's ``live_server`` (a real HTTP
server on a free port), a real Celery worker and kubesim, as the clusters tests run them.

``gpupool(...)`` runs the installed console script (``.venv/bin/gpupool``, what ``make venv``
puts there) as a subprocess, with a configuration folder of the test's own; ``cli(...)``
runs the same commands in this process through click's ``CliRunner`` (faster, for the many
exit-code cases), still over HTTP to the live server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from django.conf import settings

from portal.tokens import api_token_create
from tests.clusters.conftest import (  # noqa: F401  (fixtures)
    TEST_KEYS,
    WorkerProcess,
    _cluster_settings,
    _database_url,
    _fresh_clients,
    admit,
    celery_worker,
    celery_worker_process,
    cluster,
    register,
    sim,
    sim_config,
    watchers,
)
from tests.identity.conftest import oidc_idp, oidc_settings  # noqa: F401  (fixtures)
from tests.ports import HOST, gunicorn_running

SCRIPT = Path(sys.executable).parent / "gpupool"


@pytest.fixture
def gunicorn_portal(celery_worker: WorkerProcess, tmp_path: Path) -> Iterator[str]:  # noqa: F811
    """The portal as deployed (``gunicorn config.wsgi`` with gthread workers, DEBUG off) on a
    free port, on this test's database, its cluster tasks going to the test's Celery worker:
    the URL. Its log is printed when the test fails."""
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "CELERY_BROKER_URL": celery_worker.broker,
        "GPUPOOL_CLUSTERS_QUEUE": celery_worker.queue,
        "GPUPOOL_SECRET_KEYS": ",".join(TEST_KEYS),
        "GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS": "true",
        "ALLOWED_HOSTS": f"{HOST},localhost",
        "DEBUG": "false",
        "SECRET_KEY": settings.SECRET_KEY,  # the test's own: tokens made here hash the same
        "SECURE_SSL_REDIRECT": "false",
        "DB_CONN_MAX_AGE": "0",
        "PYTHONUNBUFFERED": "1",
    }
    with gunicorn_running(
        env,
        tmp_path / "gunicorn.log",
        "--worker-class=gthread",
        "--workers=1",
        "--threads=4",
        "--timeout=60",
        "--log-level=warning",
    ) as url:
        yield url


def ctrl_c_as_in_a_terminal() -> None:
    """``preexec_fn`` of a CLI started to be Ctrl-C'd: SIGINT back to its default. A shell
    starts background commands (``make test &``, nohup, some CI runners) with SIGINT ignored,
    a child inherits that, and Python then installs no KeyboardInterrupt handler: the signal
    the test sends, as a terminal would, would be ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def token_for(user: Any) -> str:
    _token, raw = api_token_create(user=user, name="cli test")
    return raw


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """An environment with no GPUPOOL_* of the caller's and a config folder of the test's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
    env.update(
        {
            "HOME": str(tmp_path),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "GPUPOOL_RETRIES": "1",
        }
    )
    return env


@pytest.fixture
def gpupool(cli_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``gpupool("ls", "--json", input=...)`` → the finished process of the installed script."""
    if not SCRIPT.exists():
        pytest.fail(f"{SCRIPT} is missing: `make venv` installs the CLI (pip install -e ./cli)")

    def run(*args: str, input: str | None = None, timeout: float = 60) -> Any:
        return subprocess.run(
            [str(SCRIPT), *args],
            env=cli_env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run


@pytest.fixture
def cli(live_server: Any, cli_env: dict[str, str]) -> Callable[..., Result]:
    """``cli(user, "show", job_id)`` → click's Result, logged in as ``user`` through
    GPUPOOL_URL and GPUPOOL_TOKEN (``user=None``: no credentials at all)."""
    from gpupool_cli.main import cli as command

    tokens: dict[Any, str] = {}

    def run(user: Any, *args: str, env: dict[str, str] | None = None) -> Result:
        extra: dict[str, str | None] = {**cli_env, "GPUPOOL_URL": None, "GPUPOOL_TOKEN": None}
        if user is not None:
            if user.pk not in tokens:
                tokens[user.pk] = token_for(user)
            extra.update({"GPUPOOL_URL": live_server.url, "GPUPOOL_TOKEN": tokens[user.pk]})
        extra.update(env or {})
        return CliRunner().invoke(command, list(args), env=extra, catch_exceptions=False)

    return run
