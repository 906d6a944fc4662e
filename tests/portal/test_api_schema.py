"""Property-based API testing: schemathesis drives every operation in the OpenAPI schema,
in-process over WSGI, with schema-valid and schema-violating data, as two tenants (Bob of
Vision, Charlie of Language) and a platform admin (Root).

What must hold for every request: no 5xx; the status code, content type, headers and body are
the ones the schema documents for that operation; invalid data is refused with a 4xx; one
tenant never reads an object the other owns (schemathesis replays Bob's reads as Charlie);
an operation does not answer without credentials. A stateful run then chains operations
along the links schemathesis infers (submit a job, read it, cancel it, read its events).

``make test`` runs a bounded tier; ``make fuzz`` sets ``GPUPOOL_FUZZ_EXAMPLES`` and
``GPUPOOL_FUZZ_STEPS`` higher and a random seed (``GPUPOOL_FUZZ_SEED``, printed on failure).
The totals are printed at the end of the run (``tests/portal/conftest.py``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from django.utils import timezone
from hypothesis import HealthCheck
from schemathesis.specs.openapi.checks import ignored_auth
from schemathesis.wfc.escalation import restore_identity_assignments

from clusters.models import Cluster
from config.wsgi import application
from portal.models import ApiToken
from tests.conftest import job_body

AUTH_FILE = Path(__file__).with_name("schemathesis-auth.json")
"""The three identities as a Web Fuzzing Commons auth document; the tokens are made for them
by the ``identities`` fixture, so they exist only in the test database."""

EXAMPLES = int(os.environ.get("GPUPOOL_FUZZ_EXAMPLES", "12"))
STEPS = int(os.environ.get("GPUPOOL_FUZZ_STEPS", "15"))
SEED = int(os.environ.get("GPUPOOL_FUZZ_SEED", "14"))


def _drawn(dictionary: str, *places: str, probability: float = 0.8) -> dict[str, Any]:
    return {place: {"dictionary": dictionary, "probability": probability} for place in places}


config = schemathesis.Config.from_dict(
    {
        "seed": SEED,
        "suppress-health-check": ["all"],
        "continue-on-failure": True,
        "generation": {"mode": "all", "max-examples": EXAMPLES},
        "phases": {
            "examples": {"enabled": True},
            "coverage": {"enabled": True},
            "fuzzing": {"enabled": True},
            "stateful": {"enabled": True, "max-steps": STEPS},
        },
        "checks": {
            "enabled": True,
            # Schema-valid is not the same as acceptable: a team you are not in, a model the
            # catalog lacks or a quota on a team that does not exist are well-formed and still
            # refused (400/404 naming the field). Every other check applies.
            "positive_data_acceptance": {"enabled": False},
        },
        "auth": {"wfc": {"path": str(AUTH_FILE), "peers": ["bob", "charlie"]}},
        # Values the portal knows, drawn often enough that schema-valid requests get past
        # "no such team" to the code behind it; Bob is in vision, not in language.
        "dictionaries": {
            "teams": {"values": ["vision", "language", "robotics"]},
            "models": {"values": ["t4", "l4", "a100-80gb", "h100-sxm", "a100-80gb-mig-1g.10gb"]},
            "cohorts": {"values": ["default"]},
            "images": {"values": ["python:3.11", "nvcr.io/nvidia/pytorch:24.05-py3"]},
            "names": {"values": ["resnet50", "bert large", "llm-7b:v2"]},
            "clusters": {"values": ["east"]},
        },
        "parameters": {
            **_drawn("teams", "body.team", "body.jobs[*].team", "query.team", "path.team"),
            **_drawn("teams", "path.slug"),
            **_drawn(
                "models", "body.gpu_model", "body.gpu_models[*]", "body.jobs[*].gpu_models[*]"
            ),
            **_drawn("models", "path.model", "query.model"),
            **_drawn("cohorts", "body.cohort", "path.cohort"),
            **_drawn("images", "body.image", "body.jobs[*].image"),
            **_drawn("names", "body.name", "body.jobs[*].name", probability=0.5),
            **_drawn("clusters", "path.name", "query.cluster"),
        },
    }
)
schema = schemathesis.openapi.from_wsgi("/api/schema/", application, config=config)
# Platform admins' operations run as Root from the start (and Bob's and Charlie's 403 on them
# is checked in tests of their own): no request is spent finding that out.
restore_identity_assignments(
    schema,
    {
        "POST /api/v1/quotas/": "root",
        "POST /api/v1/cohort-quotas/": "root",
        "POST /api/v1/clusters/": "root",
        "POST /api/v1/clusters/{name}/test/": "root",
        "POST /api/v1/clusters/{name}/sync/": "root",
    },
)


@pytest.fixture
def identities(bob: Any, charlie: Any, root: Any, catalog: Any, settings: Any) -> None:
    """Bob, Charlie and Root with the API tokens the auth document names, and a registered
    cluster to read. The submit throttle and the token failure limit are raised: thousands of
    requests a minute are the point here, and schemathesis's check that bad credentials are
    refused (401) sends them by the hundred from one address, which the limit would answer
    429 while the valid token beside them still works."""
    settings.GPUPOOL_SUBMIT_RATE = "1000000/min"
    settings.GPUPOOL_API_AUTH_FAILURE_RATE = "1000000/min"
    Cluster.objects.create(name="east", api_url="https://k8s.example.org")
    users = {"bob": bob, "charlie": charlie, "root": root}
    for entry in json.loads(AUTH_FILE.read_text())["auth"]:
        raw = entry["fixedHeaders"][0]["value"].removeprefix("Bearer ")
        ApiToken.objects.create(
            user=users[entry["name"]],
            name="schemathesis",
            prefix=raw[:12],  # the lookup part, as portal.tokens stores it
            digest=hashlib.sha256(raw.encode()).hexdigest(),
            expires_at=timezone.now() + dt.timedelta(days=1),
        )


@pytest.fixture(autouse=True)
def _keep_the_test_transaction_open():
    """Like Django's test Client: requests must not close the connection holding the test's
    transaction (the WSGI handler would, at request end)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@contextmanager
def rolled_back() -> Iterator[None]:
    """Whatever a case or scenario writes is undone after it, so every one starts from the same
    database: Hypothesis replays a failure to shrink it, and a replay that met other rows would
    draw differently (its ``FlakyStrategyDefinition``) or not fail again."""
    with transaction.atomic():
        try:
            yield
        finally:
            transaction.set_rollback(True)


class Tally:
    """This test's requests by kind of data, for the run's totals (``conftest.py``)."""

    def __init__(self) -> None:
        self.positive = self.negative = 0

    def count(self, case: Any) -> None:
        meta = case.meta
        if meta is not None and meta.generation.mode == schemathesis.GenerationMode.NEGATIVE:
            self.negative += 1
        else:
            self.positive += 1


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Any:
    counts = Tally()
    yield counts
    request.node.user_properties.append(
        ("schemathesis", {"positive": counts.positive, "negative": counts.negative, "seed": SEED})
    )


@pytest.mark.django_db
@schema.parametrize()
@hypothesis.settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_holds_to_its_schema(case, identities, tally):
    tally.count(case)
    with rolled_back():
        case.call_and_validate()


@pytest.mark.django_db
def test_chains_of_operations_hold_to_the_schema(identities, tally):
    """Stateful: responses feed the next request along the inferred links."""

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            self.scenario = rolled_back()
            self.scenario.__enter__()

        def teardown(self) -> None:
            self.scenario.__exit__(None, None, None)

        def after_call(self, response: Any, case: Any) -> None:
            tally.count(case)

    Workflow.run(
        settings=hypothesis.settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
    )
    assert tally.positive > 0


def _call(method: str, path: str, identity: str, **kwargs: Any) -> Any:
    """One request through schemathesis as ``identity``, its answer checked against the schema
    with the fuzzing's checks (but ``ignored_auth``, which takes a token given here for one
    it generated)."""
    if "body" in kwargs:
        kwargs["media_type"] = "application/json"
    case = schema[path][method].Case(**kwargs)
    token = next(
        e["fixedHeaders"][0]["value"]
        for e in json.loads(AUTH_FILE.read_text())["auth"]
        if e["name"] == identity
    )
    response = case.call(headers={"Authorization": token})
    case.validate_response(response, excluded_checks=[ignored_auth])
    return response


@pytest.mark.django_db
def test_a_job_s_whole_life_answers_as_the_schema_says(identities):
    """Deterministic, unlike the fuzzing: the answers a user meets most, each checked."""
    job = _call("POST", "/api/v1/jobs/", "bob", body=job_body()).json()
    path = {"job_id": job["id"]}
    _call("GET", "/api/v1/jobs/{job_id}/", "bob", path_parameters=path)
    first = _call("GET", "/api/v1/jobs/{job_id}/events/", "bob", path_parameters=path).json()
    assert first["results"][0]["from_state"] == ""  # the first event comes from nowhere
    _call("POST", "/api/v1/jobs/{job_id}/cancel/", "bob", path_parameters=path)
    _call("GET", "/api/v1/jobs/", "bob", query={"mine": "true", "page_size": "1"})
    batch = _call("POST", "/api/v1/jobs/batch/", "bob", body={"jobs": [job_body(), job_body()]})
    assert batch.status_code == 201
    _call("GET", "/api/v1/jobs/{job_id}/", "charlie", path_parameters=path)  # a 404, documented


@pytest.mark.django_db
@pytest.mark.parametrize("identity", ["bob", "root"])
def test_clusters_answer_members_and_admins_as_the_schema_says(identities, identity):
    listed = _call("GET", "/api/v1/clusters/", identity).json()
    one = _call("GET", "/api/v1/clusters/{name}/", identity, path_parameters={"name": "east"})
    assert ("api_url" in one.json()) == (identity == "root") == ("api_url" in listed[0])


def test_the_schema_documents_every_job_endpoint():
    raw = schema.raw_schema
    for path in (
        "/api/v1/jobs/",
        "/api/v1/jobs/batch/",
        "/api/v1/jobs/{job_id}/",
        "/api/v1/jobs/{job_id}/cancel/",
        "/api/v1/jobs/{job_id}/events/",
        "/api/v1/gpu-models/",
        "/api/v1/teams/",
    ):
        assert path in raw["paths"], path
    assert "apiToken" in raw["components"]["securitySchemes"]


def test_every_operation_documents_the_errors_it_can_answer():
    for path, operations in schema.raw_schema["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            assert {"400", "401", "403"} <= codes, (method, path)
            if "{" in path:
                assert "404" in codes, (method, path)
            if "requestBody" in operation:
                assert "413" in codes, (method, path)
    submit = schema.raw_schema["paths"]["/api/v1/jobs/"]["post"]["responses"]
    assert {"409", "429"} <= set(submit)
    error = submit["400"]["content"]["application/json"]["schema"]["$ref"]
    assert error == "#/components/schemas/Error"


def test_members_and_admins_see_clusters_through_their_own_schemas():
    components = schema.raw_schema["components"]["schemas"]
    shapes = components["ClusterView"]["oneOf"]
    assert {s["$ref"].rsplit("/", 1)[1] for s in shapes} == {"Cluster", "ClusterAdmin"}
    assert components["Cluster"]["additionalProperties"] is False
    assert "api_url" not in components["Cluster"]["properties"]
