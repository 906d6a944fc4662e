"""Deployment files: settings hold up in production, docker-compose is wired to real things."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION_ENV = {
    "DEBUG": "false",
    "SECRET_KEY": "x" * 20 + "-a-long-random-production-secret-" + "y" * 20,
    "ALLOWED_HOSTS": "gpupool.example.org",
    "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpupool"),
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    "CACHE_URL": "redis://127.0.0.1:6379/1",
    # Fernet key for cluster credentials (a test value; production keeps its own secret).
    "GPUPOOL_SECRET_KEYS": "ni275Kw9zX1dblvT2Xssxo5jL-qfVcGwPYyKlRJ3Lho=",
}


def _manage(
    *args: str, env: dict[str, str], unset: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    # Test-only, not production (a developer's shell may allow local cluster URLs).
    leaked = ("DEBUG", "SECRET_KEY", "DJANGO_ALLOW_ASYNC_UNSAFE", "GPUPOOL_ALLOW_", *unset)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(leaked)}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_settings_pass_the_deploy_check():
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr


def test_production_without_a_secret_key_fails_loudly():
    env = {**PRODUCTION_ENV, "SECRET_KEY": ""}
    result = _manage("check", env=env)
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


@pytest.mark.parametrize("how", ["unset", "empty"])
def test_production_without_cluster_secret_keys_fails_loudly(how):
    """No ``GPUPOOL_SECRET_KEYS`` with DEBUG off: start-up fails and says which variable to set.
    A key made up on the spot would leave every stored cluster credential unreadable after the
    next restart, so there is no silent default in production."""
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "GPUPOOL_SECRET_KEYS"}
    if how == "empty":
        env["GPUPOOL_SECRET_KEYS"] = ""
    result = _manage("check", env=env, unset=("GPUPOOL_SECRET_KEYS",))
    assert result.returncode != 0
    assert "ImproperlyConfigured: GPUPOOL_SECRET_KEYS (or GPUPOOL_SECRET_KEYS_FILE) must be set" \
        in result.stderr, result.stderr  # fmt: skip
    # The same settings with DEBUG on start (a key derived for the demo): only production fails.
    demo = _manage("check", env={**env, "DEBUG": "true"}, unset=("GPUPOOL_SECRET_KEYS",))
    assert demo.returncode == 0, demo.stderr


def test_a_malformed_cluster_secret_key_names_the_variable_but_never_echoes_it():
    good, bad = PRODUCTION_ENV["GPUPOOL_SECRET_KEYS"], "my-old-password-not-a-fernet-key"
    env = {**PRODUCTION_ENV, "GPUPOOL_SECRET_KEYS": f"{good},{bad}"}
    result = _manage("check", env=env, unset=("GPUPOOL_SECRET_KEYS",))
    assert result.returncode != 0
    assert "GPUPOOL_SECRET_KEYS: key 2 is not a Fernet key" in result.stderr, result.stderr
    assert bad not in result.stdout + result.stderr
    assert good not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [("DEBUG", "maybe"), ("GPUPOOL_MAX_GPUS_PER_REPLICA", "eight"), ("DB_CONN_MAX_AGE", "-1")],
)
def test_a_malformed_setting_names_the_variable(name, value):
    result = _manage("check", env={name: value})
    assert result.returncode != 0
    assert name in result.stderr


def test_a_secret_can_come_from_a_file(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("file-secret-" + "".join(chr(97 + i % 26) for i in range(60)) + "\n")
    env = {**PRODUCTION_ENV, "SECRET_KEY": "", "SECRET_KEY_FILE": str(secret)}
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("extra", "allowed"),
    [({}, "False"), ({"GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS": "true"}, "True")],
    ids=["default", "operator opts in"],
)
def test_production_refuses_loopback_cluster_urls_unless_the_operator_opts_in(extra, allowed):
    """The demo and the tests run kubesim on loopback; a production portal must not connect
    to its own host unless someone decided so."""
    code = (
        "from django.conf import settings; from clusters.clients import cluster_url_check\n"
        "print('allowed:', settings.GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS)\n"
        "try:\n    cluster_url_check('https://127.0.0.1:6443')\n"
        "except Exception as exc:\n    print('refused:', exc)\n"
    )
    result = _manage("shell", "-c", code, env={**PRODUCTION_ENV, **extra})
    assert result.returncode == 0, result.stderr
    assert f"allowed: {allowed}" in result.stdout
    assert ("refused: 127.0.0.1 is a loopback" in result.stdout) == (allowed == "False")


def _settings_variables() -> set[str]:
    source = "\n".join(p.read_text() for p in sorted((ROOT / "config" / "settings").glob("*.py")))
    names = set(
        re.findall(
            r'(?:env(?:\.\w+|_int|_bool|_secret|_float)|_networks_setting)\(\s*"([A-Z_]+)"', source
        )
    )
    names |= set(re.findall(r'os\.environ\.get\(\s*"([A-Z_]+)"', source))
    return names


def test_compose_services_run_commands_of_this_project_and_set_only_read_variables():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(services)
    known = _settings_variables()
    for name in ("web", "worker", "beat"):
        service = services[name]
        assert "healthcheck" in service, name
        # PROMETHEUS_MULTIPROC_DIR is read by prometheus-client, not by the settings.
        unknown = set(service["environment"]) - known - {"PROMETHEUS_MULTIPROC_DIR"}
        assert not unknown, f"{name} sets variables the settings never read: {unknown}"
        command = " ".join(service["command"])
        for module in re.findall(r"gunicorn (\S+)", command):
            assert (ROOT / (module.split(".")[0])).is_dir()
            assert (ROOT / module.replace(".", "/")).with_suffix(".py").exists()
        if "celery" in command:
            assert re.search(r"-A config\b", command) and (ROOT / "config" / "celery.py").exists()
        for sub in re.findall(r"manage\.py (\w+)", command):
            result = _manage("help", sub, env={})
            assert result.returncode == 0, f"{name}: manage.py {sub} does not exist"
    for name in ("postgres", "redis"):
        assert "healthcheck" in services[name]


def test_celery_worker_and_beat_commands_exist():
    assert shutil.which("celery", path=str(Path(sys.executable).parent))


def test_every_portal_process_is_restarted_when_it_exits():
    """A worker, beat, watcher or web process that dies (a crash, the OOM killer) comes back by
    itself, in docker-compose and in the systemd units under deploy/."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name in ("web", "worker", "beat", "watcher"):
        assert compose["services"][name].get("restart") in ("always", "unless-stopped"), name
    units = sorted((ROOT / "deploy" / "systemd").glob("gpupool-*.service"))
    commands = " ".join(
        line for unit in units for line in unit.read_text().splitlines() if "ExecStart=" in line
    )
    for process in ("gunicorn config.wsgi", "celery -A config worker", "celery -A config beat",
                    "manage.py watch_clusters"):  # fmt: skip
        assert process in commands, f"no unit runs {process}"
    for unit in units:
        assert "\nRestart=always\n" in unit.read_text(), unit.name
