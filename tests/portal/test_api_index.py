"""``GET /api/v1/`` is the API's front door: a JSON index, never a 404; the docs link back."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_the_index_answers_anyone_with_the_schema_the_docs_and_each_collection(api_as, bob):
    response = APIClient().get("/api/v1/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    index = response.json()
    assert urlsplit(index["schema"]).path == "/api/schema/"
    assert urlsplit(index["docs"]).path == "/api/docs/"
    assert urlsplit(index["collections"]["jobs"]["url"]).path == "/api/v1/jobs/"
    assert index["collections"]["jobs"]["description"]
    # every collection it lists is there for a member (a POST-only one says so: 405); one
    # it describes as for platform admins refuses a member plainly (403)
    client = api_as(bob)
    for key, link in index["collections"].items():
        status = client.get(urlsplit(link["url"]).path).status_code
        admins_only = link["description"].startswith("platform admins:")
        assert status in ((200, 405, 403) if admins_only else (200, 405)), (key, status)
    assert APIClient().get(urlsplit(index["schema"]).path).status_code == 200


def _collection_routes(resolver: URLResolver, prefix: str = "") -> set[str]:
    routes: set[str] = set()
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            routes |= _collection_routes(entry, route)
        elif isinstance(entry, URLPattern) and "<" not in route and "(?P" not in route:
            routes.add(route.lstrip("^").rstrip("$"))
    return routes


def test_the_index_lists_every_collection_the_api_routes():
    api = next(
        e for e in get_resolver().url_patterns if str(getattr(e, "pattern", "")) == "api/v1/"
    )
    routed = {"/api/v1/" + r for r in _collection_routes(api)} - {"/api/v1/"}
    listed = {
        urlsplit(link["url"]).path
        for link in APIClient().get("/api/v1/").json()["collections"].values()
    }
    assert routed - listed == set()


def test_the_docs_page_links_back_to_the_index(client, bob):
    client.force_login(bob)
    page = client.get("/api/docs/").content.decode()
    assert 'href="/api/v1/"' in page
    assert '<html lang="en">' in page
