"""Run the demo: web server, a real Celery worker and beat, in the foreground.

Each child runs in its own process group, so Ctrl-C (or SIGTERM) here stops every process this
command started, and nothing is left behind. Later parts (kubesim, the scheduler) hook in by
appending to ``demo_processes``.

The children write to ``var/demo/<name>.log``, not to the terminal: once the web server
answers, the URL and the demo users are printed last and stay on screen (the login page names
them too, in demo mode).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from portal.demo import DEMO_PASSWORD, demo_user_roles

WEB_READY_SECONDS = 60.0


def demo_processes(host: str, port: int) -> list[tuple[str, list[str]]]:
    py = sys.executable
    return [
        ("web", [py, "manage.py", "runserver", "--noreload", f"{host}:{port}"]),
        ("worker", [py, "-m", "celery", "-A", "config", "worker", "-l", "info", "-c", "2"]),
        ("beat", [py, "-m", "celery", "-A", "config", "beat", "-l", "info"]),
        *_cluster_processes(py),
    ]


def _cluster_processes(py: str) -> list[tuple[str, list[str]]]:
    """kubesim (the mixed A100/V100/T4 config) and the watcher, which registers it first.

    The clock runs 5x fast so a demo job (300 simulated seconds) ends in about a minute.
    """
    from django.conf import settings

    kubeconfig = Path(settings.VAR_DIR) / "demo" / "kubesim.kubeconfig"
    kubeconfig.unlink(missing_ok=True)  # a stale one would name a dead server
    config = Path(settings.BASE_DIR) / "kubesim" / "configs" / "small.yaml"
    return [
        (
            "kubesim",
            [
                py,
                "-m",
                "kubesim",
                "--config",
                str(config),
                "--kubeconfig",
                str(kubeconfig),
                "--clock-speed",
                "5",
            ],
        ),
        ("watcher", [py, "manage.py", "watch_clusters", "--demo-kubeconfig", str(kubeconfig)]),
    ]


def _sso_process() -> tuple[str, list[str]]:
    """The test OpenID provider (tests/identity/idp, Node) on the config ``seed_demo_sso``
    wrote; the web process finds it through the GPUPOOL_OIDC_* variables set here."""
    import json

    from django.conf import settings

    config_path = Path(settings.VAR_DIR) / "demo" / "idp.json"
    config = json.loads(config_path.read_text())
    client = config["clients"][0]
    os.environ.update(
        {
            "GPUPOOL_OIDC_PROVIDERS": "demo",
            "GPUPOOL_OIDC_DEMO_ISSUER": config["issuer"],
            "GPUPOOL_OIDC_DEMO_CLIENT_ID": client["client_id"],
            "GPUPOOL_OIDC_DEMO_CLIENT_SECRET": client["client_secret"],
            "GPUPOOL_OIDC_DEMO_LABEL": "Demo SSO",
        }
    )
    server = Path(settings.BASE_DIR) / "tests" / "identity" / "idp" / "server.mjs"
    return ("sso", ["node", str(server), str(config_path)])


class Command(BaseCommand):
    help = "Start the demo portal (web, Celery worker and beat); Ctrl-C stops everything."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("DEMO_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("DEMO_PORT", "8000")))
        parser.add_argument(
            "--sso",
            action="store_true",
            help="Also start the test OpenID provider (after manage.py seed_demo_sso)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        children: dict[str, subprocess.Popen[bytes]] = {}
        stopping = False

        def stop(*_: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        processes = demo_processes(options["host"], options["port"])
        if options["sso"]:
            processes.insert(0, _sso_process())
        os.environ["GPUPOOL_DEMO"] = "true"  # the login page names the demo users
        logs = Path(settings.VAR_DIR) / "demo"
        logs.mkdir(parents=True, exist_ok=True)
        for name, cmd in processes:
            with open(logs / f"{name}.log", "ab") as log:
                children[name] = subprocess.Popen(  # noqa: S603
                    cmd, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
                )
            self.stdout.write(f"started {name} (pid {children[name].pid}), log {logs}/{name}.log")
        url = f"http://{options['host']}:{options['port']}/"
        try:
            if self._web_ready(url + "login/", children["web"]):
                self._banner(url, logs)
            else:
                self.stderr.write(f"the web server did not answer at {url}; see {logs}/web.log")
                stopping = True
            while not stopping:
                for name, proc in children.items():
                    if proc.poll() is not None:
                        self.stderr.write(
                            f"{name} exited with {proc.returncode} (see {logs}/{name}.log); "
                            "stopping the demo"
                        )
                        stopping = True
                time.sleep(0.5)
        finally:
            self._stop_all(children)

    def _web_ready(self, url: str, web: subprocess.Popen[bytes]) -> bool:
        """Wait until the web server answers (it migrates nothing; a few seconds)."""
        deadline = time.monotonic() + WEB_READY_SECONDS
        while time.monotonic() < deadline and web.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=2):  # noqa: S310 (our own http URL)
                    return True
            except OSError:
                time.sleep(0.5)
        return False

    def _banner(self, url: str, logs: Path) -> None:
        """The URL and the demo users, printed last so that they stay on screen."""
        lines = [
            "",
            f"gpupool demo: {url}   (Ctrl-C stops everything; logs in {logs}/)",
            f"Log in as one of these users, password {DEMO_PASSWORD}:",
            *(f"  {username:<8} {role}" for username, role in demo_user_roles()),
            f"kubectl: KUBECONFIG={logs}/kubesim.kubeconfig kubectl get nodes",
            "",
        ]
        self.stdout.write(self.style.SUCCESS("\n".join(lines)))

    def _stop_all(self, children: dict[str, subprocess.Popen[bytes]]) -> None:
        for proc in children.values():
            if proc.poll() is None:
                proc.terminate()  # the leader shuts its own children down (Celery's pool)
        deadline = time.monotonic() + 10
        for proc in children.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        self.stdout.write("demo stopped")
