"""Fixtures that start a private kubesim per test and official-client handles onto it.

Every test gets its own server on port 0 (so xdist workers never collide) with the clock frozen
(``clock_speed=0``): nothing happens between two lines of a test unless it calls
``sim.settle()`` (let controllers react) or ``sim.advance(seconds)`` (let time pass).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from kubesim import KubeSim

# Three identical 4-GPU A100 nodes: small enough that scheduling messages are predictable
# ("0/3 nodes are unavailable: 3 Insufficient nvidia.com/gpu.").
TINY: dict[str, Any] = {
    "name": "tiny",
    "simulation": {
        "podStartupSeconds": 2,
        "defaultDurationSeconds": 300,
        "podTerminationSeconds": 1,
        "bookmarkIntervalSeconds": 0.2,
    },
    "namespaces": ["team-a", "team-b"],
    "queues": [
        {"name": "team-a", "weight": 2, "capability": {"nvidia.com/gpu": 8}},
        {"name": "team-b", "weight": 1},
    ],
    "nodePools": [
        {
            "name": "a100",
            "count": 3,
            "gpuModel": "a100-80gb",
            "gpus": 4,
            "cpu": 32,
            "memory": "256Gi",
        },
    ],
}


def make_client(sim: KubeSim, token: str | None = None) -> client.ApiClient:
    """An ApiClient built from the server's kubeconfig (CA verified, bearer token)."""
    return config.new_client_from_config_dict(sim.kubeconfig_dict(token=token))


@pytest.fixture
def sim_config() -> dict[str, Any]:
    """The cluster of the ``sim`` fixture; override in a module for another shape."""
    return TINY


@pytest.fixture
def sim(sim_config: dict[str, Any]) -> Iterator[KubeSim]:
    """A started server with frozen time."""
    with KubeSim(sim_config, clock_speed=0, roles={"viewer-token": "view"}) as server:
        yield server


@pytest.fixture
def api(sim: KubeSim) -> Iterator[client.ApiClient]:
    """An official client for the admin token."""
    api_client = make_client(sim)
    yield api_client
    api_client.close()


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    """CoreV1Api on the test server."""
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    """CustomObjectsApi on the test server."""
    return client.CustomObjectsApi(api)


_ADMIN = object()


def raw(
    sim: KubeSim,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: Any = _ADMIN,
    headers: dict[str, str] | None = None,
    timeout: float = 5.0,
) -> tuple[int, dict[str, str], Any]:
    """A plain HTTP(S) request (CA verified), for error shapes the client hides.

    Returns (status, lower-cased headers, body decoded as JSON when it is JSON).
    """
    import http.client
    import json
    import ssl

    send_headers = dict(headers or {})
    if token is _ADMIN:
        token = sim.token
    if token is not None:
        send_headers["Authorization"] = f"Bearer {token}"
    payload = None
    if body is not None:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        send_headers.setdefault("Content-Type", "application/json")
    if sim.tls:
        context = ssl.create_default_context(cadata=(sim.ca_pem or b"").decode())
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            sim.host, sim.port, context=context, timeout=timeout
        )
    else:
        conn = http.client.HTTPConnection(sim.host, sim.port, timeout=timeout)
    try:
        conn.request(method, path, body=payload, headers=send_headers)
        response = conn.getresponse()
        data = response.read()
        got = {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()
    if got.get("content-type", "").startswith("application/json") and data:
        return response.status, got, json.loads(data)
    return response.status, got, data.decode()
