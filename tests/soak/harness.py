"""The soak's world: the stack, kubesim, seeded teams, HTTP clients and the cluster's truth.

This process is the operator and the users at once: it seeds the portal's database through
Django (pointed at the stack's private PostgreSQL), serves the cluster (kubesim, in this
process, so scenarios can arm its faults or empty it), submits jobs over HTTP to gunicorn as
API clients do, and reads the ground truth from the cluster through the official
``kubernetes`` client: one Volcano Job per job that got one, never two.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3

from kubesim import KubeSim
from tests.soak.stack import HOST, Stack

LABEL_JOB_ID = "gpupool.dev/job-id"
TEAMS = ("vision", "language", "robotics", "speech", "science")
USERS_PER_TEAM = 10
RACE_TEAM = "race"  # 8 GPUs nominal, no borrowing: the quota race runs here
RACE_GPUS = 8
NODES = 64  # 512 A100s: every team's quota fits at once

KUBESIM_CONFIG: dict[str, Any] = {
    "name": "soak",
    "simulation": {
        "podStartupSeconds": 1,
        "defaultDurationSeconds": 20,
        "podTerminationSeconds": 1,
        "historySize": 50000,
    },
    "namespaces": ["gpupool"],
    "nodePools": [
        {"name": "a100", "count": NODES, "gpuModel": "a100-80gb", "gpus": 8, "cpu": 256,
         "memory": "2Ti"},
    ],
}  # fmt: skip

SETTLED = {"QUEUED", "SUBMITTED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"}
IN_FLIGHT = {"ADMITTED", "CANCELLING", "PREEMPTING"}


def job_body(team: str, serial: int, *, seconds: int = 20, gpus: int = 1) -> dict[str, Any]:
    return {
        "team": team,
        "name": f"soak-{serial}",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["sh", "-c", f"sleep {seconds}"],
        "replicas": 1,
        "gpus_per_replica": gpus,
        "min_gpu_memory_gib": 40,
    }


@dataclass
class Answer:
    """One HTTP answer, as a client saw it."""

    status: int
    body: bytes
    headers: dict[str, str]
    seconds: float

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Submits:
    """What clients were told: job ids answered 201, other answers by status."""

    accepted: dict[str, str] = field(default_factory=dict)  # public id -> idempotency key
    statuses: Counter[int] = field(default_factory=Counter)
    not_json: int = 0
    without_retry_after: int = 0
    transport_errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, answer: Answer | None, key: str) -> None:
        with self.lock:
            if answer is None:
                self.transport_errors += 1
                return
            self.statuses[answer.status] += 1
            if answer.status in (200, 201):
                self.accepted[answer.json()["id"]] = key
                return
            if not answer.headers.get("content-type", "").startswith("application/json"):
                self.not_json += 1
            if answer.status == 503 and "retry-after" not in answer.headers:
                self.without_retry_after += 1


class World:
    """The stack with kubesim, the seeded portal, and the operator's tools."""

    def __init__(
        self, folder: Path, *, extra_env: dict[str, str] | None = None, pool: str = "threads"
    ) -> None:
        self.folder = folder
        self.stack = Stack(folder, extra_env=extra_env or {}, pool=pool)
        self.sim: KubeSim | None = None
        self.tokens: dict[str, list[str]] = {}
        self.cluster_id = 0
        self.http = urllib3.PoolManager(maxsize=64, retries=False)
        self._kube: Any = None

    # -- bring-up -------------------------------------------------------------------------
    def start(self) -> None:
        import os

        self.stack.start_storage()
        os.environ.update(self.stack.env())
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
        self.sim = KubeSim(KUBESIM_CONFIG, clock_speed=1.0)
        self.sim.start()
        self._seed()
        self.stack.start_services()
        self.wait_serving()

    def _seed(self) -> None:
        from django.contrib.auth import get_user_model

        from clusters.inventory import inventory_sync
        from clusters.queues import queues_sync
        from clusters.registration import cluster_credentials_from_input, cluster_register
        from portal.models import Membership, Role, Team
        from portal.tokens import api_token_create
        from scheduling.catalog import catalog_seed
        from scheduling.models import Cohort, GpuModel, Quota, TeamPolicy

        assert self.sim is not None
        from django.conf import settings

        catalog_seed(path=settings.GPUPOOL_GPU_CATALOG_CSV)
        a100 = GpuModel.objects.get(key="a100-80gb")
        users = get_user_model().objects
        for slug in (*TEAMS, RACE_TEAM):
            team = Team.objects.create(name=slug.title(), slug=slug)
            if slug == RACE_TEAM:
                cohort = Cohort.objects.create(name="Race alone", slug="race-alone")
                TeamPolicy.objects.create(team=team, cohort=cohort)
                Quota.objects.create(team=team, gpu_model=a100, nominal=RACE_GPUS,
                                     borrowing_limit=0)  # fmt: skip
            else:
                Quota.objects.create(team=team, gpu_model=a100, nominal=NODES * 8 // 6)
                # (5 x 85 GPUs: the scenarios' jobs fit; QUEUED is never a fair wait here)
            self.tokens[slug] = []
            for i in range(USERS_PER_TEAM):
                user = users.create_user(f"{slug}{i:02d}", password=None)
                Membership.objects.create(user=user, team=team, role=Role.MEMBER)
                self.tokens[slug].append(api_token_create(user=user, name="soak")[1])
        credentials = cluster_credentials_from_input(kubeconfig=self.kubeconfig_text())
        cluster, _ = cluster_register(
            name="soak", credentials=credentials, namespace="gpupool", request_rate=200,
            creates_in_flight=16,
        )  # fmt: skip
        self.cluster_id = cluster.pk
        assert inventory_sync(cluster=cluster).ok
        assert queues_sync(cluster=cluster).ok

    def kubeconfig_text(self) -> str:
        import yaml

        assert self.sim is not None
        config = self.sim.kubeconfig_dict(namespace="gpupool")
        config.pop("preferences", None)
        return yaml.safe_dump(config)

    def wait_serving(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self.request("GET", "/api/v1/teams/", self.tokens[TEAMS[0]][0])
            if answer is not None and answer.status == 200:
                return
            time.sleep(0.2)
        raise RuntimeError(f"gunicorn does not serve:\n{self.stack.services['web'].tail()}")

    def close(self) -> None:
        self.stack.close()
        if self.sim is not None:
            self.sim.stop()
        from django.db import connections

        connections.close_all()

    # -- HTTP as a client -----------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        token: str | None,
        body: Any = None,
        *,
        timeout: float = 30,
        **headers: str,
    ) -> Answer | None:
        sent = {"Accept": "application/json", "X-Forwarded-Proto": "https"}
        if token:
            sent["Authorization"] = f"Bearer {token}"
        sent.update({k.replace("_", "-"): v for k, v in headers.items()})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        began = time.monotonic()
        try:
            resp = self.http.request(
                method, f"http://{HOST}:{self.stack.web_port}{path}", body=data, headers=sent,
                timeout=urllib3.Timeout(connect=5, read=timeout), redirect=False,
            )  # fmt: skip
        except urllib3.exceptions.HTTPError:
            return None
        return Answer(
            resp.status,
            resp.data,
            {k.lower(): v for k, v in resp.headers.items()},
            time.monotonic() - began,
        )

    def submit(self, team: str, user: int, serial: int, into: Submits, **body: Any) -> None:
        """One ``POST /api/v1/jobs/`` with an Idempotency-Key; a client retries what did not
        get an answer (a reset connection) with the same key, as a careful client would."""
        key = f"soak-{uuid.uuid4()}"
        token = self.tokens[team][user % len(self.tokens[team])]
        for _ in range(3):
            answer = self.request(
                "POST", "/api/v1/jobs/", token, job_body(team, serial, **body),
                Idempotency_Key=key,
            )  # fmt: skip
            if answer is not None:
                into.record(answer, key)
                return
            time.sleep(0.5)
        into.record(None, key)

    def submit_many(
        self, count: int, *, clients: int, teams: Iterable[str] = TEAMS, **body: Any
    ) -> Submits:
        """``count`` submits from ``clients`` concurrent clients, spread over ``teams``."""
        names = list(teams)
        out = Submits()
        serials = iter(range(count))
        lock = threading.Lock()

        def client(index: int) -> None:
            team = names[index % len(names)]
            while True:
                with lock:
                    serial = next(serials, None)
                if serial is None:
                    return
                self.submit(team, index // len(names), serial, out, **body)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return out

    # -- the cluster's truth, through the official client ---------------------------------
    def kube(self) -> Any:
        if self._kube is None:
            import yaml
            from kubernetes import client, config

            api = config.new_client_from_config_dict(yaml.safe_load(self.kubeconfig_text()))
            self._kube = (client.CustomObjectsApi(api), client.CoreV1Api(api))
        return self._kube

    def reset_kube(self) -> None:
        self._kube = None

    def volcano_jobs(self) -> dict[str, list[dict[str, Any]]]:
        """The cluster's Volcano Jobs by portal job id (a list: more than one is a twin)."""
        custom, _ = self.kube()
        items = custom.list_cluster_custom_object(
            "batch.volcano.sh", "v1alpha1", "jobs", label_selector=LABEL_JOB_ID,
            _request_timeout=30,
        )["items"]  # fmt: skip
        out: dict[str, list[dict[str, Any]]] = {}
        for item in items:
            if (item["metadata"].get("deletionTimestamp")) is not None:
                continue
            job_id = item["metadata"]["labels"][LABEL_JOB_ID]
            out.setdefault(job_id, []).append(item)
        return out

    def running_pods(self, team: str) -> int:
        _, core = self.kube()
        pods = core.list_pod_for_all_namespaces(
            label_selector=f"gpupool.dev/team={team}", _request_timeout=30
        ).items
        return sum(1 for p in pods if p.status.phase == "Running" and p.spec.node_name)


def retrying(fn: Callable[[], Any], *, seconds: float = 60) -> Any:
    """Call ``fn`` until it stops raising (the database may be restarting)."""
    from django.db import close_old_connections, connections

    deadline = time.monotonic() + seconds
    while True:
        try:
            return fn()
        except Exception:
            if time.monotonic() > deadline:
                raise
            close_old_connections()
            with contextlib.suppress(Exception):
                connections.close_all()
            time.sleep(0.5)
