"""The kube adapter's own promises: in-memory client certificates, rate limits, words."""

from __future__ import annotations

import os
import ssl
import threading
import time

import pytest

from clusters.kube import Connection, KubeClient
from clusters.ratelimit import SharedRateLimiter
from tests.clusters.test_secrets import _client_cert


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="Linux only")
def test_a_client_certificate_is_handed_to_ssl_from_memory_only(sim, tmp_path):
    cert_pem, key_pem = _client_cert()
    client = KubeClient(
        Connection(
            name="c", url=sim.url, ca_pem=sim.ca_pem.decode(),
            client_cert_pem=cert_pem, client_key_pem=key_pem,
        )
    )  # fmt: skip
    path = client.api.configuration.cert_file
    assert path.startswith("/proc/self/fd/")
    ssl.create_default_context().load_cert_chain(path)  # what urllib3 does per connection
    fd = client._memfd
    client.close()
    with pytest.raises(OSError):
        os.fstat(fd)


@pytest.mark.django_db
def test_the_rate_limiter_spaces_requests_to_the_configured_rate():
    limiter = SharedRateLimiter(f"test-{time.time()}", rate=100)
    started = time.monotonic()
    for _ in range(40):
        limiter.acquire()
    elapsed = time.monotonic() - started
    # 10 per 100 ms window: 40 requests need 4 windows, so the last one waits for the start
    # of the 4th; the first window may be nearly over when the loop begins, hence 0.2 s.
    assert 0.2 <= elapsed < 2.0


@pytest.mark.django_db
@pytest.mark.parametrize("rate", [4, 15])
def test_a_rate_under_ten_a_second_is_not_rounded_up(rate):
    """One request per 250 ms at 4/s, two per 133 ms at 15/s: never 10 per second or 20."""
    limiter = SharedRateLimiter(f"slow-{rate}-{time.time()}", rate=rate)
    started = time.monotonic()
    for _ in range(2 * rate + 1):
        limiter.acquire()
    # 2 s worth of requests plus one: the last waits for a window starting 2 s after the first.
    assert time.monotonic() - started >= 2.0 - limiter.window_seconds


def test_errors_come_back_in_words(sim):
    client = KubeClient(Connection(name="c", url=sim.url, ca_pem=sim.ca_pem.decode(),
                                   token=sim.token))  # fmt: skip
    sim.faults.add(verb="list", resource="nodes", status=503, count=1)
    with pytest.raises(Exception) as caught:
        client.list_nodes()
    assert caught.value.transient and "503" in caught.value.message
    client.close()


@pytest.mark.django_db
def test_limiters_of_several_processes_share_one_budget_per_window():
    """Each process takes slots a few at a time; together they never exceed the window."""
    key = f"shared-{time.time()}"
    limiters = [SharedRateLimiter(key, rate=200) for _ in range(3)]  # 20 per 100 ms window
    granted: list[float] = []
    lock = threading.Lock()

    def hammer(limiter: SharedRateLimiter) -> None:
        for _ in range(30):
            limiter.acquire()
            with lock:
                granted.append(time.monotonic())

    started = time.monotonic()
    threads = [threading.Thread(target=hammer, args=(lim,)) for lim in limiters for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(granted) == 180
    # 180 requests at 20 per window need 9 windows (the first may be nearly over), where
    # three budgets of their own would have let them through in 3.
    assert max(granted) - started >= 0.7
