"""Every input an attacker can send gets a clean 4xx, never a 500: the API answers in its JSON
error shape naming what was wrong, pages with a plain error page. Each case here answered 500
before (issue 14); nothing is stored by any of them."""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from clusters.models import Cluster
from portal.models import Job
from portal.tokens import api_token_create
from scheduling.models import Quota
from tests.conftest import job_body
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def _api_error(response: Any, status: int) -> dict[str, Any]:
    """The body of an API error, after checking it has the API's shape."""
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"message", "extra"} and body["message"]
    assert isinstance(body["extra"]["fields"], dict)
    return body


def _error_page(response: Any, status: int, title: str) -> str:
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert f"<h1>{title}</h1>" in page
    assert 'href="/"' in page  # a way back
    return page


@pytest.fixture
def bob_client(bob: Any, catalog: Any) -> Client:
    """Bob with a real bearer token, the way a script calls the API."""
    token = api_token_create(user=bob, name="bad-input")[1]
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.fixture
def root_client(root: Any, catalog: Any) -> Client:
    token = api_token_create(user=root, name="bad-input")[1]
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


# --- A NUL in a session cookie -------------------------------------------------------------


@pytest.mark.parametrize("path", ["/login/", "/admin/login/", "/", "/jobs/", "/quotas/"])
def test_a_session_cookie_with_a_nul_is_a_400_page_that_clears_the_cookie(path):
    client = Client(HTTP_COOKIE="sessionid=abcdefgh\x00ijklmnop")
    response = client.get(path)
    page = _error_page(response, 400, "Bad request")
    assert "cookie sessionid" in page
    assert response.cookies["sessionid"]["max-age"] == 0  # the browser drops it
    assert Client().get("/login/").status_code == 200  # and then the login page works


def test_a_session_cookie_with_a_nul_on_the_api_is_a_json_400():
    client = Client(HTTP_COOKIE="sessionid=abcdefgh\x00ijklmnop")
    body = _api_error(client.get("/api/v1/jobs/"), 400)
    assert body["extra"]["fields"] == {"cookie sessionid": ["May not contain NUL characters."]}


# --- JSON nested too deep ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "body"),
    [
        ("/api/v1/jobs/", "[" * 1000 + "]" * 1000),
        ("/api/v1/jobs/", '{"team": ' + '{"a": ' * 1000 + "1" + "}" * 1001),
        ("/api/v1/jobs/batch/", '{"jobs": ' + "[" * 1000 + "]" * 1000 + "}"),
        ("/api/v1/jobs/batch/", '{"jobs": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    ],
    ids=["array 1,000 deep", "object 1,000 deep", "batch 1,000 deep", "batch 100,000 deep"],
)
def test_json_nested_too_deep_is_a_400_naming_the_limit(bob_client, url, body):
    answer = _api_error(bob_client.post(url, body, content_type="application/json"), 400)
    assert "32 levels" in answer["message"]
    assert not Job.objects.exists()


def test_json_just_under_the_depth_limit_reaches_the_validation(bob_client):
    body = json.dumps(job_body(env={"A": "x"}))  # 2 deep
    assert (
        bob_client.post("/api/v1/jobs/", body, content_type="application/json").status_code == 201
    )
    nested = json.dumps(job_body(command=[[[["python"]]]]))
    answer = _api_error(
        bob_client.post("/api/v1/jobs/", nested, content_type="application/json"), 400
    )
    assert "command" in answer["extra"]["fields"]


# --- NUL (and unpaired surrogates) in body strings --------------------------------------


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"team": "vis\x00ion"}, "team"),
        ({"name": "a\x00b"}, "name"),
        ({"command": ["python", "x\x00"]}, "command[1]"),
        ({"env": {"A": "\x00"}}, "env.A"),
        ({"env": {"A\x00": "x"}}, "env.A\\x00"),
        ({"team": "vis\ud800ion"}, "team"),
    ],
    ids=["team", "name", "command item", "env value", "env name", "unpaired surrogate"],
)
def test_a_string_that_cannot_be_stored_in_a_submit_is_a_400_naming_the_field(
    bob_client, override, field
):
    text = json.dumps(job_body(**override))  # ensure_ascii: NUL as \u0000, surrogates escaped
    answer = _api_error(
        bob_client.post("/api/v1/jobs/", text, content_type="application/json"), 400
    )
    assert field in answer["extra"]["fields"], answer
    assert not Job.objects.exists()


def test_a_nul_in_a_batch_names_the_job_and_field(bob_client):
    text = json.dumps({"jobs": [job_body(), job_body(image="python:3\x00")]})
    answer = _api_error(
        bob_client.post("/api/v1/jobs/batch/", text, content_type="application/json"), 400
    )
    assert list(answer["extra"]["fields"]) == ["jobs[1].image"]
    assert not Job.objects.exists()


def test_a_nul_in_a_quota_post_is_a_400_naming_the_field(root_client, vision):
    for body in (
        {"team": "vis\x00ion", "gpu_model": "t4", "nominal": 1},
        {"team": "vision", "gpu_model": "t\x004", "nominal": 1},
    ):
        text = json.dumps(body)
        answer = _api_error(
            root_client.post("/api/v1/quotas/", text, content_type="application/json"), 400
        )
        assert set(answer["extra"]["fields"]) <= {"team", "gpu_model"}
        assert len(answer["extra"]["fields"]) == 1
    form = _api_error(
        root_client.post(
            "/api/v1/quotas/", {"team": "vis\x00ion", "gpu_model": "t4", "nominal": 1}
        ),
        400,
    )
    assert list(form["extra"]["fields"]) == ["team"]
    assert not Quota.objects.exists()


def test_a_nul_in_a_page_form_is_a_400_page_naming_the_field(client, bob, catalog, vision):
    client.force_login(bob)
    response = client.post("/jobs/new/", {"team": "vis\x00ion", "name": "x", "image": "python:3"})
    assert "<code>team</code>" in _error_page(response, 400, "Bad request")
    assert not Job.objects.exists()


# --- Crafted cursors --------------------------------------------------------------------


def _cursor(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "cD1hYmM=",  # the issue's: p=abc
        _cursor("p=%C2%B9"),
        _cursor("p=1e9999"),
        _cursor("o=abc"),
        _cursor("r=x"),
        "not base64!",
    ],
    ids=["p=abc", "p=¹", "p=1e9999", "o=abc", "r=x", "not base64"],
)
def test_a_crafted_cursor_on_the_job_list_is_a_400_naming_it(bob_client, bob, vision, cursor):
    JobFactory(owner=bob, team=vision)
    answer = _api_error(bob_client.get("/api/v1/jobs/", {"cursor": cursor}), 400)
    assert list(answer["extra"]["fields"]) == ["cursor"]


def test_a_crafted_cursor_on_the_events_list_is_a_400_naming_it(bob_client, bob, vision):
    job = JobFactory(owner=bob, team=vision)
    url = f"/api/v1/jobs/{job.public_id}/events/"
    answer = _api_error(bob_client.get(url, {"cursor": "cD1hYmM="}), 400)
    assert list(answer["extra"]["fields"]) == ["cursor"]


def test_real_cursors_still_page_through_events(bob_client, bob, vision):
    job = JobFactory(owner=bob, team=vision)
    start = timezone.now()
    for i in range(5):
        job.events.create(
            created_at=start + dt.timedelta(seconds=i), to_state="QUEUED", reason=f"r{i}"
        )
    url = f"/api/v1/jobs/{job.public_id}/events/?page_size=2"
    reasons = []
    while url:
        page = bob_client.get(url).json()
        reasons += [e["reason"] for e in page["results"]]
        url = page["next"]
    assert reasons == [f"r{i}" for i in range(5)]


# --- Unicode digits ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "param"),
    [
        ("/api/v1/pool/history/", "since"),
        ("/api/v1/pool/history/", "until"),
        ("/api/v1/pool/history/", "step"),
        ("/api/v1/teams/vision/usage/", "since"),
        ("/api/v1/queue/stats/", "window"),
    ],
)
@pytest.mark.parametrize("value", ["¹", "²h", "٣d", "1١"])
def test_unicode_digits_in_a_time_parameter_are_a_400_naming_it(bob_client, url, param, value):
    answer = _api_error(bob_client.get(url, {param: value}), 400)
    assert list(answer["extra"]["fields"]) == [param]


def test_ascii_durations_still_work(bob_client):
    assert (
        bob_client.get("/api/v1/pool/history/", {"since": "2h", "step": "600"}).status_code == 200
    )
    assert bob_client.get("/api/v1/queue/stats/", {"window": "24h"}).status_code == 200


# --- A NUL in a path parameter -----------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/quotas/vision/a%00b/",
        "/api/v1/cohort-quotas/default/a%00b/",
        "/api/v1/jobs/a%00b/",
        "/api/v1/clusters/a%00b/",
    ],
)
def test_a_nul_in_a_path_parameter_is_a_400(bob_client, path):
    answer = _api_error(bob_client.get(path), 400)
    assert list(answer["extra"]["fields"]) == ["path"]


def test_a_nul_in_a_page_path_is_a_400_page(client, bob):
    client.force_login(bob)
    _error_page(client.get("/jobs/a%00b/"), 400, "Bad request")


# --- Kubeconfig nested too deep --------------------------------------------------------


@pytest.mark.parametrize(
    "kubeconfig",
    ["[" * 10_000, "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 200))],
    ids=["10,000 flow [", "200 block mappings"],
)
def test_a_kubeconfig_nested_too_deep_is_a_400_at_registration(root_client, kubeconfig):
    text = json.dumps({"name": "deep", "kubeconfig": kubeconfig})
    answer = _api_error(
        root_client.post("/api/v1/clusters/", text, content_type="application/json"), 400
    )
    assert "nests more than 32 levels" in answer["extra"]["fields"]["kubeconfig"][0]
    assert not Cluster.objects.exists()


# --- Bodies over the size limit -------------------------------------------------------


@pytest.mark.parametrize("url", ["/api/v1/jobs/", "/api/v1/jobs/batch/", "/api/v1/quotas/"])
def test_a_body_over_the_limit_is_a_json_413_naming_it(root_client, url):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    text = json.dumps({"name": "x" * limit})
    answer = _api_error(root_client.post(url, text, content_type="application/json"), 413)
    assert f"{limit:,} bytes" in answer["message"]
    assert not Job.objects.exists()


def test_a_page_form_over_the_limit_is_a_413_page_naming_it(client, bob, catalog, vision):
    client.force_login(bob)
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    response = client.post("/jobs/new/", {"team": "vision", "name": "x" * limit})
    assert f"{limit:,} bytes" in _error_page(response, 413, "Request too large")
    assert not Job.objects.exists()


# --- Unknown URLs -----------------------------------------------------------------------


def test_an_unknown_api_url_is_a_json_404_and_a_page_a_404_page(bob_client, client, bob):
    _api_error(bob_client.get("/api/v1/no-such-thing/"), 404)
    _api_error(bob_client.get("/api/v1/quotas/Not A Slug/t4/"), 404)
    client.force_login(bob)
    _error_page(client.get("/no-such-page/"), 404, "Not found")


def test_a_form_with_too_many_fields_is_a_413_naming_the_limit(client, bob, root_client):
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    fields = {f"f{i}": "x" for i in range(limit + 1)}
    answer = _api_error(root_client.post("/api/v1/quotas/", fields), 413)
    assert f"{limit:,} fields" in answer["message"]
    client.force_login(bob)
    page = _error_page(client.post("/jobs/new/", fields), 413, "Request too large")
    assert f"{limit:,} fields" in page


# --- Query parameters are what the schema says, or a 400 naming them --------------------


@pytest.mark.parametrize(
    ("url", "query", "field"),
    [
        ("/api/v1/jobs/", "kind=", "kind"),
        ("/api/v1/jobs/", "mine=", "mine"),
        ("/api/v1/jobs/", "mine=null", "mine"),
        ("/api/v1/jobs/", "kind=training&kind=inference", "kind"),
        ("/api/v1/jobs/", "page_size=0", "page_size"),
        ("/api/v1/jobs/", "page_size=1.5", "page_size"),
        ("/api/v1/jobs/", "page_size=1&page_size=2", "page_size"),
        ("/api/v1/gpu-models/match/", "requires_fp8=null", "requires_fp8"),
        ("/api/v1/gpu-models/match/", "min_gpu_memory_gib=1.5", "min_gpu_memory_gib"),
        ("/api/v1/gpu-models/match/", "min_gpu_memory_gib=١", "min_gpu_memory_gib"),
        ("/api/v1/gpu-models/match/", "selection_policy=best", "selection_policy"),
        ("/api/v1/queue/", "team=not a slug", "team"),
        ("/api/v1/queue/stats/", "window=1h&window=2h", "window"),
    ],
)
def test_a_query_parameter_the_schema_does_not_allow_is_a_400_naming_it(
    bob_client, url, query, field
):
    answer = _api_error(bob_client.get(f"{url}?{query}"), 400)
    assert list(answer["extra"]["fields"]) == [field]


@pytest.mark.parametrize("query", ["", "state=QUEUED&state=RUNNING&mine=true&page_size=10"])
def test_well_formed_job_list_queries_still_work(bob_client, query):
    assert bob_client.get(f"/api/v1/jobs/?{query}").status_code == 200


def test_a_log_tail_in_other_digits_is_a_400(bob_client, bob, vision):
    job = JobFactory(owner=bob, team=vision)
    answer = _api_error(bob_client.get(f"/api/v1/jobs/{job.public_id}/logs/?tail=١٠"), 400)
    assert list(answer["extra"]["fields"]) == ["tail"]


@pytest.mark.parametrize(
    "cookie",
    ['sessionid="abcdefgh\\000ijklmnop"', "sessionid=../../etc/passwd", "sessionid=" + "A" * 40],
)
def test_a_malformed_session_cookie_is_no_session_not_a_500(client, cookie):
    page = client.get("/jobs/", HTTP_COOKIE=cookie)
    assert page.status_code == 302 and page["Location"].startswith("/login/")
    api = client.get("/api/v1/jobs/", HTTP_COOKIE=cookie)
    assert api.status_code in (401, 403) and api["Content-Type"].startswith("application/json")
