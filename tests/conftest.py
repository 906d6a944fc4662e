"""Shared fixtures: the personas, the seeded GPU catalog, and API clients.

Alice is a team admin of Vision, Bob a member of Vision, Charlie the admin of another team
(Language), Victor a read-only viewer of Vision, and Root a platform admin (staff).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from portal.models import Role
from scheduling.catalog import catalog_seed
from tests.factories import MembershipFactory, TeamFactory, UserFactory


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """PBKDF2's deliberate slowness buys nothing in tests."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _no_counts_from_earlier_tests() -> None:
    """Every test calls from 127.0.0.1, and user ids come back after a flush: one test's bad
    tokens or submits must not count in the next's period (the counts live in the shared
    cache, not in the rolled-back database)."""
    from django.core.cache import cache

    from portal.api.auth import FAILURES_KEY
    from portal.api.throttles import THROTTLE_KEY, _local

    _local.clear()
    if hasattr(cache, "delete_pattern"):  # django-redis; the local-memory cache is per process
        cache.delete_pattern(f"{FAILURES_KEY}:*")
        cache.delete_pattern(f"{THROTTLE_KEY}:*")


@pytest.fixture
def catalog(db: Any) -> None:
    catalog_seed(path=settings.GPUPOOL_GPU_CATALOG_CSV)


@pytest.fixture
def vision(db: Any):
    return TeamFactory(name="Vision", slug="vision")


@pytest.fixture
def language(db: Any):
    return TeamFactory(name="Language", slug="language")


@pytest.fixture
def alice(vision):
    user = UserFactory(username="alice")
    MembershipFactory(user=user, team=vision, role=Role.ADMIN)
    return user


@pytest.fixture
def bob(vision):
    user = UserFactory(username="bob")
    MembershipFactory(user=user, team=vision, role=Role.MEMBER)
    return user


@pytest.fixture
def charlie(language):
    user = UserFactory(username="charlie")
    MembershipFactory(user=user, team=language, role=Role.ADMIN)
    return user


@pytest.fixture
def victor(vision):
    user = UserFactory(username="victor")
    MembershipFactory(user=user, team=vision, role=Role.VIEWER)
    return user


@pytest.fixture
def root(db: Any):
    return UserFactory(username="root", is_staff=True, is_superuser=True)


@pytest.fixture
def api_as():
    """``api_as(user)`` → a DRF APIClient logged in as that user (session auth, like a browser
    that has the CSRF cookie; token auth is tested separately)."""

    def make(user: Any) -> APIClient:
        client = APIClient()
        client.force_authenticate(user=user)
        return client

    return make


def job_body(**overrides: Any) -> dict[str, Any]:
    """A valid submission body for team ``vision``; override any field."""
    body: dict[str, Any] = {
        "team": "vision",
        "name": "resnet50",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["python", "train.py"],
        "replicas": 2,
        "gpus_per_replica": 4,
        "min_gpu_memory_gib": 40,
    }
    body.update(overrides)
    return body
