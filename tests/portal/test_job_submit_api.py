"""Submitting jobs over REST: defaults, every rejected field, idempotency, batches, throttling."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection
from rest_framework.test import APIClient

from portal.models import Job, JobEvent, JobState, Priority
from scheduling.models import TeamPolicy
from tests.conftest import job_body

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"


def test_bob_submits_a_job_and_it_is_queued_with_an_event(api_as, bob, catalog):
    response = api_as(bob).post(URL, job_body(), format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["state"] == "QUEUED"
    assert (data["team"], data["owner"], data["total_gpus"]) == ("vision", "bob", 8)
    job = Job.objects.get(public_id=data["id"])
    assert job.events.get().to_state == JobState.QUEUED


def test_defaults_are_what_a_user_would_expect(api_as, bob, catalog):
    body = {"team": "vision", "name": "tiny", "image": "python:3.11"}
    data = api_as(bob).post(URL, body, format="json").json()
    assert data["kind"] == "training"
    assert (data["replicas"], data["gpus_per_replica"]) == (1, 1)
    assert data["selection_policy"] == "cheapest"
    assert data["allow_fallback"] is True
    assert data["priority"] == "normal"
    assert data["cpu_per_replica"] == 4.0  # 4 cores per GPU
    assert data["memory_gib_per_replica"] == 16.0  # 16 GiB per GPU
    assert data["max_runtime_minutes"] == 24 * 60


def test_an_inference_job_with_a_port_and_explicit_models(api_as, bob, vision, catalog):
    TeamPolicy.objects.create(team=vision, max_priority=Priority.HIGH)
    body = job_body(
        kind="inference",
        port=8080,
        gpu_models=["l4", "t4"],
        min_gpu_memory_gib=None,
        selection_policy="ordered",
        priority="high",
        replicas=1,
        gpus_per_replica=1,
    )
    response = api_as(bob).post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(public_id=response.json()["id"])
    assert (job.port, job.gpu_models, job.priority) == (8080, ["l4", "t4"], Priority.HIGH)
    # Not running yet: an endpoint with no URL, not ready; a TCP probe without a path.
    assert response.json()["endpoint"] == {
        "url": None,
        "kind": None,
        "port": 8080,
        "ready": False,
        "readiness_path": "",
        "curl": "",
    }


def test_an_inference_job_keeps_its_readiness_path_and_training_has_no_endpoint(
    api_as, bob, catalog
):
    body = job_body(kind="inference", port=8000, readiness_path="/v1/models")
    served = api_as(bob).post(URL, body, format="json")
    assert served.status_code == 201, served.json()
    assert served.json()["readiness_path"] == "/v1/models"
    assert Job.objects.get(public_id=served.json()["id"]).readiness_path == "/v1/models"
    trained = api_as(bob).post(URL, job_body(), format="json").json()
    assert trained["endpoint"] is None


INVALID = [
    ("team", {"team": "nope"}, "team"),
    ("team the user is not in", {"team": "language"}, "team"),
    ("unknown gpu model", {"gpu_models": ["a200"], "min_gpu_memory_gib": None}, "gpu_models"),
    ("zero replicas", {"replicas": 0}, "replicas"),
    ("negative gpus", {"gpus_per_replica": -1}, "gpus_per_replica"),
    ("too many gpus per replica", {"gpus_per_replica": 9}, "gpus_per_replica"),
    ("gpus as text", {"gpus_per_replica": "four"}, "gpus_per_replica"),
    ("malformed image", {"image": "Not An Image!"}, "image"),
    ("image with spaces", {"image": "ubuntu latest"}, "image"),
    ("env name not an identifier", {"env": {"1BAD": "x"}}, "env"),
    ("reserved env name", {"env": {"WORLD_SIZE": "8"}}, "env"),
    ("env name that looks like a secret", {"env": {"HF_TOKEN": "hf_x"}}, "env"),
    ("env name ending in _PASS", {"env": {"DB_PASS": "x"}}, "env"),
    ("env name ending in _PASSWD", {"env": {"MYSQL_PASSWD": "x"}}, "env"),
    ("env name ending in _PAT", {"env": {"GITHUB_PAT": "x"}}, "env"),
    ("env name ending in _KEY", {"env": {"SSH_KEY": "x"}}, "env"),
    ("an AWS access key id", {"env": {"AWS_ACCESS_KEY_ID": "AKIA"}}, "env"),
    ("secret ref as text", {"env_from_secrets": {"HF_TOKEN": "hf/token"}}, "env_from_secrets"),
    (
        "secret ref to a bad secret name",
        {"env_from_secrets": {"HF_TOKEN": {"secret": "HF_Creds", "key": "token"}}},
        "env_from_secrets",
    ),
    (
        "secret ref to a bad key",
        {"env_from_secrets": {"HF_TOKEN": {"secret": "hf", "key": "a/b"}}},
        "env_from_secrets",
    ),
    (
        "secret ref for a reserved name",
        {"env_from_secrets": {"RANK": {"secret": "hf", "key": "rank"}}},
        "env_from_secrets",
    ),
    (
        "secret ref and env for one name",
        {"env": {"HF_HOME": "/x"}, "env_from_secrets": {"HF_HOME": {"secret": "h", "key": "k"}}},
        "env_from_secrets",
    ),
    ("oversized command", {"command": ["x" * 20000]}, "command"),
    ("command not a list", {"command": "python train.py"}, "command"),
    ("unknown field", {"gpu": 1}, "gpu"),
    ("models and constraints together", {"gpu_models": ["t4"]}, "gpu_models"),
    ("ordered without models", {"selection_policy": "ordered"}, "selection_policy"),
    ("constraints nothing meets", {"min_gpu_memory_gib": 4000}, "min_gpu_memory_gib"),
    ("port on a training job", {"port": 8080}, "port"),
    ("privileged port", {"kind": "inference", "port": 80}, "port"),
    ("readiness path on a training job", {"readiness_path": "/health"}, "readiness_path"),
    (
        "readiness path without a port",
        {"kind": "inference", "readiness_path": "/health"},
        "readiness_path",
    ),
    (
        "relative readiness path",
        {"kind": "inference", "port": 8000, "readiness_path": "health"},
        "readiness_path",
    ),
    (
        "readiness path with a space",
        {"kind": "inference", "port": 8000, "readiness_path": "/he alth"},
        "readiness_path",
    ),
    (
        "readiness path not a string",
        {"kind": "inference", "port": 8000, "readiness_path": 5},
        "readiness_path",
    ),
    ("unknown kind", {"kind": "batch"}, "kind"),
    ("unknown priority", {"priority": "urgent"}, "priority"),
    ("runtime beyond the limit", {"max_runtime_minutes": 10**6}, "max_runtime_minutes"),
    ("empty name", {"name": ""}, "name"),
    ("missing image", {"image": None}, "image"),
]


@pytest.mark.parametrize(("case", "override", "field"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_input_names_the_field_and_stores_nothing(
    api_as, bob, catalog, case, override, field
):
    response = api_as(bob).post(URL, job_body(**override), format="json")
    assert response.status_code in (400, 404), response.json()
    body = response.json()
    assert body["message"]
    assert field in body["extra"]["fields"], body
    assert Job.objects.count() == 0
    assert JobEvent.objects.count() == 0


def test_a_secret_in_env_is_refused_pointing_at_the_secret_store(api_as, bob, catalog):
    response = api_as(bob).post(URL, job_body(env={"WANDB_API_KEY": "k"}), format="json")
    assert response.status_code == 400
    (message,) = response.json()["extra"]["fields"]["env"]
    assert message.startswith("WANDB_API_KEY looks like a secret;")
    assert "Kubernetes Secret in the job's namespace" in message
    assert "env_from_secrets" in message


def test_names_that_only_resemble_secrets_are_fine(api_as, bob, catalog):
    env = {"TOKENIZERS_PARALLELISM": "false", "MAX_NEW_TOKENS": "256", "CACHE_KEY": "v2"}
    response = api_as(bob).post(URL, job_body(env=env), format="json")
    assert response.status_code == 201, response.json()


# Credentials by another name: an auth value, a connection string with its password in it, a
# password file. Each is refused naming the variable and pointing at env_from_secrets.
CREDENTIAL_FAMILIES = [
    "HF_AUTH",
    "BASIC_AUTH",
    "GITHUB_AUTH_TOKEN",
    "HTTP_AUTHORIZATION",
    "NGROK_AUTHTOKEN",
    "DATABASE_URL",
    "REDIS_URL",
    "MONGODB_URI",
    "SQLALCHEMY_DATABASE_URI",
    "CELERY_BROKER_URL",
    "PG_DSN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "PGPASSFILE",
    "PGPASSWORD",
    "DB_PASSWD",
    "GOOGLE_APPLICATION_CREDENTIALS",
]


@pytest.mark.parametrize("name", CREDENTIAL_FAMILIES)
def test_credential_families_are_refused_naming_the_variable(api_as, bob, catalog, name):
    response = api_as(bob).post(URL, job_body(env={name: "x"}), format="json")
    assert response.status_code == 400, name
    (message,) = response.json()["extra"]["fields"]["env"]
    assert message.startswith(f"{name} looks like a secret;")
    assert "env_from_secrets" in message
    assert Job.objects.count() == 0


# Ordinary names that share a word with a credential's: must keep working.
MUST_ACCEPT = [
    "AUTHOR",
    "AUTH_MODE",
    "AUTH_URL",
    "OS_AUTH_URL",
    "NO_AUTH",
    "OAUTHLIB_INSECURE_TRANSPORT",
    "HF_HOME",
    "HF_ENDPOINT",
    "MODEL_URL",
    "DATA_URL",
    "WANDB_BASE_URL",
    "S3_ENDPOINT_URL",
    "MLFLOW_TRACKING_URI",
    "DB_HOST",
    "REDIS_HOST",
    "SENTRY_DSN",
    "BYPASS_CACHE",
    "TOKENIZERS_PARALLELISM",
    "MAX_NEW_TOKENS",
    "CACHE_KEY",
]


def test_ordinary_names_near_the_credential_families_are_accepted(api_as, bob, catalog):
    env = dict.fromkeys(MUST_ACCEPT, "1")
    response = api_as(bob).post(URL, job_body(env=env), format="json")
    assert response.status_code == 201, response.json()
    assert set(response.json()["env"]) == set(MUST_ACCEPT)


def test_a_connection_string_goes_through_a_secret_reference(api_as, bob, catalog):
    refs = {"DATABASE_URL": {"secret": "warehouse", "key": "url"}}
    response = api_as(bob).post(URL, job_body(env_from_secrets=refs), format="json")
    assert response.status_code == 201, response.json()


def test_a_secret_is_referenced_by_name_and_key_never_by_value(api_as, bob, catalog):
    refs = {"HF_TOKEN": {"secret": "hf-credentials", "key": "token"}}
    response = api_as(bob).post(URL, job_body(env_from_secrets=refs), format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["env_from_secrets"] == refs
    assert Job.objects.get().env_from_secrets == refs


def test_a_body_that_is_not_an_object_is_a_400(api_as, bob, catalog):
    response = api_as(bob).post(URL, [1, 2], format="json")
    assert response.status_code == 400
    assert Job.objects.count() == 0


def test_a_viewer_cannot_submit(api_as, victor, catalog):
    response = api_as(victor).post(URL, job_body(), format="json")
    assert response.status_code == 403
    assert "team" in response.json()["extra"]["fields"]
    assert Job.objects.count() == 0


def test_anonymous_callers_get_401(catalog):
    response = APIClient().post(URL, job_body(), format="json")
    assert response.status_code in (401, 403)
    assert Job.objects.count() == 0


def test_the_same_idempotency_key_returns_the_original_job(api_as, bob, catalog):
    client = api_as(bob)
    first = client.post(URL, job_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = client.post(URL, job_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert Job.objects.count() == 1


def test_a_reused_idempotency_key_with_another_body_is_a_conflict(api_as, bob, catalog):
    client = api_as(bob)
    client.post(URL, job_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    response = client.post(URL, job_body(replicas=3), format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    assert response.status_code == 409
    assert Job.objects.count() == 1


def test_idempotency_keys_are_per_user(api_as, alice, bob, catalog):
    a = api_as(alice).post(URL, job_body(), format="json", HTTP_IDEMPOTENCY_KEY="same")
    b = api_as(bob).post(URL, job_body(), format="json", HTTP_IDEMPOTENCY_KEY="same")
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_submissions_with_one_key_create_one_job(bob, catalog):
    key = f"race-{uuid.uuid4()}"
    barrier = threading.Barrier(6)
    codes: list[int] = []
    ids: set[str] = set()

    def submit() -> None:
        client = APIClient()
        client.force_authenticate(user=bob)
        barrier.wait()
        try:
            response = client.post(URL, job_body(), format="json", HTTP_IDEMPOTENCY_KEY=key)
            codes.append(response.status_code)
            ids.add(response.json()["id"])
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200] * 5 + [201]
    assert len(ids) == 1
    assert Job.objects.filter(idempotency_key=key).count() == 1


def test_a_batch_is_all_or_nothing(api_as, bob, catalog):
    jobs = [job_body(name=f"sweep-{i}") for i in range(5)]
    jobs[3]["gpus_per_replica"] = 0
    response = api_as(bob).post(URL + "batch/", {"jobs": jobs}, format="json")
    assert response.status_code == 400
    assert "jobs[3].gpus_per_replica" in response.json()["extra"]["fields"]
    assert Job.objects.count() == 0


def test_a_valid_batch_queues_every_job_with_an_event(api_as, bob, catalog):
    jobs = [job_body(name=f"sweep-{i}") for i in range(20)]
    response = api_as(bob).post(URL + "batch/", {"jobs": jobs}, format="json")
    assert response.status_code == 201, response.json()
    assert len(response.json()["jobs"]) == 20
    assert Job.objects.filter(state=JobState.QUEUED).count() == 20
    assert JobEvent.objects.count() == 20


def test_a_batch_retried_with_its_key_returns_the_same_jobs(api_as, bob, catalog):
    client = api_as(bob)
    jobs = [job_body(name=f"s-{i}") for i in range(3)]
    first = client.post(URL + "batch/", {"jobs": jobs}, format="json", HTTP_IDEMPOTENCY_KEY="b1")
    again = client.post(URL + "batch/", {"jobs": jobs}, format="json", HTTP_IDEMPOTENCY_KEY="b1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json() == again.json()
    assert Job.objects.count() == 3


@pytest.mark.parametrize("count", [2, 4], ids=["fewer jobs", "more jobs"])
def test_a_batch_key_replayed_with_another_number_of_jobs_is_a_conflict(
    api_as, bob, catalog, count
):
    client = api_as(bob)
    jobs = [job_body(name=f"s-{i}") for i in range(4)]
    first = client.post(
        URL + "batch/", {"jobs": jobs[:3]}, format="json", HTTP_IDEMPOTENCY_KEY="b1"
    )
    assert first.status_code == 201
    other = client.post(
        URL + "batch/", {"jobs": jobs[:count]}, format="json", HTTP_IDEMPOTENCY_KEY="b1"
    )
    assert other.status_code == 409
    assert "Idempotency-Key" in other.json()["extra"]["fields"]
    assert Job.objects.count() == 3


@pytest.mark.parametrize("path", ["", "batch/"], ids=["single", "batch"])
def test_a_key_cannot_name_one_job_of_a_batch(api_as, bob, catalog, path):
    client = api_as(bob)
    batch = client.post(
        URL + "batch/", {"jobs": [job_body(), job_body()]}, format="json", HTTP_IDEMPOTENCY_KEY="b"
    )
    assert batch.status_code == 201
    body = job_body() if not path else {"jobs": [job_body()]}
    response = client.post(URL + path, body, format="json", HTTP_IDEMPOTENCY_KEY="b#1")
    assert response.status_code == 400
    assert "reserved" in response.json()["extra"]["fields"]["Idempotency-Key"][0]
    assert Job.objects.count() == 2


def test_a_batch_over_the_limit_is_refused(api_as, bob, catalog, settings):
    settings.GPUPOOL_BATCH_MAX = 3
    jobs = [job_body(name=f"s-{i}") for i in range(4)]
    response = api_as(bob).post(URL + "batch/", {"jobs": jobs}, format="json")
    assert response.status_code == 400
    assert "jobs" in response.json()["extra"]["fields"]


def test_a_batch_into_a_foreign_team_names_the_job(api_as, bob, catalog):
    jobs = [job_body(), job_body(team="language")]
    response = api_as(bob).post(URL + "batch/", {"jobs": jobs}, format="json")
    assert response.status_code == 404
    assert "jobs[1].team" in response.json()["extra"]["fields"]
    assert Job.objects.count() == 0


def test_submissions_are_throttled_per_user(api_as, bob, alice, catalog, settings):
    settings.GPUPOOL_SUBMIT_RATE = "3/min"
    client = api_as(bob)
    codes = [client.post(URL, job_body(name=f"j{i}"), format="json").status_code for i in range(4)]
    assert codes == [201, 201, 201, 429]
    limited = client.post(URL, job_body(), format="json")
    assert "Retry-After" in limited.headers
    # Listing is not throttled, and Alice has her own budget.
    assert client.get(URL).status_code == 200
    assert api_as(alice).post(URL, job_body(), format="json").status_code == 201


def test_the_web_form_shares_the_api_submit_budget(client, api_as, bob, catalog, settings):
    from tests.portal.test_pages import FORM

    settings.GPUPOOL_SUBMIT_RATE = "3/min"
    api = api_as(bob)
    assert api.post(URL, job_body(name="api-1"), format="json").status_code == 201
    client.force_login(bob)
    assert client.post("/jobs/new/", FORM).status_code == 302
    assert api.post(URL, job_body(name="api-2"), format="json").status_code == 201
    refused = client.post("/jobs/new/", {**FORM, "name": "one-too-many"})
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    html = refused.content.decode()
    assert "faster than 3/min (the form and the API together)" in html
    assert 'value="one-too-many"' in html  # what was typed is kept
    assert api.post(URL, job_body(name="api-3"), format="json").status_code == 429
    assert Job.objects.count() == 3


def test_gpus_per_replica_are_bounded_by_the_largest_node_once_clusters_exist(api_as, bob, catalog):
    from django.utils import timezone

    from clusters.models import Cluster, Node

    cluster = Cluster.objects.create(name="east", api_url="https://k8s.test")
    Node.objects.create(
        cluster=cluster, name="n1", gpu_capacity=4, gpu_allocatable=4, last_seen_at=timezone.now()
    )
    response = api_as(bob).post(URL, job_body(gpus_per_replica=6), format="json")
    assert response.status_code == 400
    assert "at most 4" in response.json()["extra"]["fields"]["gpus_per_replica"][0]
    ok = api_as(bob).post(URL, job_body(gpus_per_replica=4), format="json")
    assert ok.status_code == 201
