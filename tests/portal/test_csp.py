"""A Content-Security-Policy on every response (django-csp), and templates that need nothing
it forbids. The browser tests (``tests/browser``) fail on any violation a page reports."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
STRICT = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "frame-ancestors": "'none'",
    "form-action": "'self'",
}


def _directives(header: str) -> dict[str, str]:
    parts = (p.strip().split(None, 1) for p in header.split(";") if p.strip())
    return {p[0]: (p[1] if len(p) > 1 else "") for p in parts}


def _assert_strict(response) -> None:
    directives = _directives(response["Content-Security-Policy"])
    for name, value in STRICT.items():
        assert directives.get(name) == value, (name, directives)
    assert "unsafe" not in directives["script-src"]
    assert all("unsafe-eval" not in v for v in directives.values())


def test_every_page_carries_the_policy(client, bob, vision, root):
    job = JobFactory(owner=bob, team=vision)
    _assert_strict(client.get("/login/"))
    client.force_login(bob)
    for path in (
        "/",
        "/jobs/",
        "/jobs/new/",
        f"/jobs/{job.public_id}/",
        "/queue/",
        "/quotas/",
        "/fair-share/",
        "/usage/",
        "/tokens/",
        "/pool/clusters/",
        "/clusters/",
        "/api/docs/",
        "/api/v1/jobs/",
    ):
        response = client.get(path)
        assert response.status_code == 200, path
        _assert_strict(response)
    client.force_login(root)
    _assert_strict(client.get("/admin/"))


def test_the_api_docs_load_their_script_from_the_portal_not_inline(client, bob):
    client.force_login(bob)
    page = client.get("/api/docs/").content.decode()
    assert "<style>" not in page
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", page) == []
    script = client.get("/api/docs/?script=")
    assert script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in script.content.decode()


@pytest.mark.parametrize("template", sorted(TEMPLATES.rglob("*.html")), ids=lambda p: p.name)
def test_no_template_needs_inline_script(template):
    html = template.read_text()
    inline = [
        tag
        for tag in re.findall(r"<script\b[^>]*>", html)
        if "src=" not in tag and 'type="application/json"' not in tag
    ]
    assert inline == [], "move the script to static/js/"
    assert not re.search(r"\son[a-z]+\s*=", html), "an inline event handler: use static/js/"
    assert "javascript:" not in html
    assert "hx-on" not in html and "js:" not in html, "htmx would need eval"
