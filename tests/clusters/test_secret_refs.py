"""A job reads a Secret only in its own team's namespace.

``env_from_secrets`` names a Secret; the kubelet reads it on the node from the pod's own
namespace (``valueFrom.secretKeyRef`` cannot name another), and the portal never reads
Secrets at all (``deploy/rbac.yaml`` grants it none). On a cluster with one namespace per team,
team language keeps ``hf-credentials`` in ``gp-language``: vision's own cluster credentials
are refused (403) there, and a vision job naming that Secret does not get it either: its pod
waits ``CreateContainerConfigError``, ``secret "hf-credentials" not found`` in ``gp-vision``,
until vision makes its own.

kubesim over HTTPS, the teams' tokens scoped to their namespaces as a platform admin would
bind them, the official client for what the teams do on the cluster.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from clusters.dispatch import job_dispatch
from clusters.inventory import inventory_sync
from clusters.queues import TeamQueue, queues_sync
from kubesim import KubeSim
from portal.models import JobState
from rules import volcano
from tests.clusters.conftest import kubeconfig_text, state_of, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "hf-credentials"


def _team_api(sim: KubeSim, team: str) -> Any:
    """The official client with a token that may manage Secrets in ``gp-<team>`` only."""
    token = f"{team}-token"
    sim.auth.add(
        token,
        {"user": team, "rules": [{"verbs": ["*"], "resources": ["secrets"],
                                  "namespaces": [f"gp-{team}"]}]},
    )  # fmt: skip
    config = yaml.safe_load(kubeconfig_text(sim, token=token))
    return k8s.CoreV1Api(k8s_config.new_client_from_config_dict(config))


def _secret(value: str) -> k8s.V1Secret:
    return k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(name=SECRET),
        data={"token": base64.b64encode(value.encode()).decode()},
    )


def _waiting(sim: KubeSim, job: Any) -> tuple[str, str, str] | None:
    """(namespace, reason, message) of the job's first waiting container, if any."""
    for pod in sim.list("pods"):
        labels = pod["metadata"].get("labels") or {}
        if labels.get(volcano.LABEL_JOB_ID) != str(job.public_id):
            continue
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting")
            if waiting:
                return (pod["metadata"]["namespace"], waiting["reason"], waiting["message"])
    return None


def test_a_job_cannot_read_another_teams_secret(sim, register, admit, vision, language):
    cluster = register(sim, namespace_per_team=True)
    assert inventory_sync(cluster=cluster).ok
    queues_sync(
        cluster=cluster,
        desired=[TeamQueue(t, 100, {"nvidia.com/gpu": 64}) for t in ("vision", "language")],
    )
    language_api, vision_api = _team_api(sim, "language"), _team_api(sim, "vision")
    language_api.create_namespaced_secret("gp-language", _secret("language-only"))

    # On the cluster: vision's credentials are refused in language's namespace.
    with pytest.raises(ApiException) as refused:
        vision_api.read_namespaced_secret(SECRET, "gp-language")
    assert refused.value.status == 403

    # Through the portal: a vision job naming the Secret runs in gp-vision, where there is none.
    job = admit(cluster, env_from_secrets={"HF_TOKEN": {"secret": SECRET, "key": "token"}})
    assert job_dispatch(job_id=job.pk).done
    assert state_of(job) == JobState.SUBMITTED
    sim.advance(3)
    assert wait_for(lambda: _waiting(sim, job)) == (
        "gp-vision",
        "CreateContainerConfigError",
        f'secret "{SECRET}" not found',
    )

    # Vision makes its own: the pod starts with it (the kubelet tries again by itself).
    vision_api.create_namespaced_secret("gp-vision", _secret("vision-own"))
    sim.advance(30)
    assert wait_for(
        lambda: any(
            p["status"].get("phase") == "Running"
            for p in sim.list("pods")
            if (p["metadata"].get("labels") or {}).get(volcano.LABEL_JOB_ID) == str(job.public_id)
        )
    )
