"""The kube adapter's own promises: in-memory client certificates, rate limits, words."""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import pytest

from clusters.kube import JOB_GROUP, Connection, KubeClient, KubeError
from clusters.ratelimit import SharedRateLimiter
from kubesim import KubeSim
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


# ---------------------------------------------------------------------------------------------
# Every call has a timeout: a stalled API server is a KubeError(kind="timeout"), never a hang
# ---------------------------------------------------------------------------------------------
TIMEOUT = 1.0  # the client's connect and read timeout in these tests
SLACK = 3.0  # generous: only "it did not hang" is asserted, never how fast
STALL = 8.0  # how long kubesim stalls: far past any timeout the client should keep


def _short_timeout_client(sim: KubeSim) -> KubeClient:
    return KubeClient(
        Connection(name="c", url=sim.url, ca_pem=sim.ca_pem.decode(), token=sim.token,
                   timeout=TIMEOUT)
    )  # fmt: skip


def _watch_all(client: KubeClient, resource: str, seconds: int) -> list[Any]:
    return list(
        client.watch(resource, label_selector="gpupool.io/job", resource_version="",
                     timeout_seconds=seconds)
    )  # fmt: skip


WATCH_SECONDS = 1  # the watch's own timeoutSeconds: its read timeout is this plus TIMEOUT

STALLED_CALLS: list[tuple[str, str, str, Callable[[KubeClient], Any], float]] = [
    ("list", "nodes", "listing nodes", lambda c: c.list_nodes(), TIMEOUT),
    (
        "get",
        "pods/log",
        "reading the log of pod train-1-worker-0",
        lambda c: c.read_pod_log("gpupool", "train-1-worker-0", tail_lines=100),
        TIMEOUT,
    ),
    (
        "get",
        f"jobs.{JOB_GROUP}",
        "reading Volcano Job train-1",
        lambda c: c.get_job("gpupool", "train-1"),
        TIMEOUT,
    ),
    (
        "watch",
        "pods",
        "watching pods",
        lambda c: _watch_all(c, "pods", WATCH_SECONDS),
        WATCH_SECONDS + TIMEOUT,
    ),
]


@pytest.mark.parametrize(
    ("verb", "resource", "what", "call", "budget"),
    STALLED_CALLS,
    ids=["list nodes", "pod log", "get Volcano Job", "watch (no answer at all)"],
)
def test_a_stalled_call_times_out_in_words_and_the_client_still_works(
    sim, verb, resource, what, call, budget
):
    """kubesim holds the request far past the client's timeout before answering anything (not
    even the response headers): the call ends with a transient KubeError of kind "timeout"
    that names what was being done, soon after the timeout, and the next call goes through."""
    client = _short_timeout_client(sim)
    sim.faults.add(verb=verb, resource=resource, hang=STALL, count=1)
    started = time.monotonic()
    try:
        with pytest.raises(KubeError) as caught:
            call(client)
        elapsed = time.monotonic() - started
        assert sim.faults.count(kind="hang") == 1  # the stall really hit this request
        assert caught.value.kind == "timeout", caught.value.message
        assert caught.value.transient and caught.value.status is None
        assert caught.value.message == f"{what}: the API server did not answer in time"
        assert elapsed < budget + SLACK, f"took {elapsed:.1f} s"
        assert len(client.list_nodes()) == 9  # a fresh connection, not the stalled one
    finally:
        client.close()


def test_an_idle_watch_ends_cleanly_when_the_server_closes_it(sim_config):
    """A watch with nothing to report (no events, no bookmarks) is closed by the API server at
    its ``timeoutSeconds``: the iterator just ends, it is not a timeout error (the client's
    read timeout is ``timeoutSeconds`` plus the call timeout, so a quiet stream is not cut
    short), and it does not outlive the server's deadline by much either."""
    quiet = {**sim_config, "simulation": {**sim_config["simulation"],
                                           "bookmarkIntervalSeconds": 3600}}  # fmt: skip
    seconds = 3  # three times the read timeout of an ordinary call
    with KubeSim(quiet, clock_speed=0) as server:
        client = _short_timeout_client(server)
        try:
            started = time.monotonic()
            events = _watch_all(client, "pods", seconds)
            elapsed = time.monotonic() - started
        finally:
            client.close()
    assert events == []
    assert seconds - 0.5 < elapsed < seconds + TIMEOUT + SLACK, f"took {elapsed:.1f} s"


class _SilentProxy:
    """A TCP relay to kubesim that can go silent: after ``silence()`` nothing more reaches
    the client, yet no connection is closed (a NAT or firewall that dropped its state)."""

    def __init__(self, port: int) -> None:
        self.upstream = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.silent = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(self.upstream)
                self.sockets += [client, upstream]
                for src, dst, down in ((client, upstream, False), (upstream, client, True)):
                    threading.Thread(target=self._pump, args=(src, dst, down), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        with suppress(OSError):
            while data := src.recv(65536):
                if not (down and self.silent.is_set()):
                    dst.sendall(data)

    def silence(self) -> None:
        self.silent.set()

    def close(self) -> None:
        for sock in [self.listener, *self.sockets]:
            with suppress(OSError):
                sock.close()


@pytest.fixture
def silent_proxy(sim: KubeSim) -> Iterator[_SilentProxy]:
    proxy = _SilentProxy(sim.port)
    yield proxy
    proxy.close()


def test_a_watch_whose_connection_goes_silent_mid_stream_ends_with_a_timeout(sim, silent_proxy):
    """The stream was flowing (kubesim sends a bookmark every 0.2 s), then the network drops
    every byte without closing anything: not even the server's own end of the watch arrives.
    The watch must not wait forever: the read timeout (``timeoutSeconds`` + the call timeout)
    ends it with a KubeError of kind "timeout". (Read in a thread, so a watch that does hang
    fails this test instead of hanging the run.)"""
    seconds = 2
    client = KubeClient(
        Connection(name="c", url=f"https://127.0.0.1:{silent_proxy.port}",
                   ca_pem=sim.ca_pem.decode(), token=sim.token, timeout=TIMEOUT)
    )  # fmt: skip
    events = client.watch("pods", label_selector="gpupool.io/job", resource_version="",
                          timeout_seconds=seconds)  # fmt: skip
    outcome: list[BaseException | None] = []

    def drain() -> None:
        try:
            for _ in events:
                pass
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    try:
        assert next(events).type == "BOOKMARK"  # the stream is open and flowing
        silent_proxy.silence()
        started = time.monotonic()
        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        reader.join(timeout=seconds + TIMEOUT + SLACK)
        elapsed = time.monotonic() - started
        assert not reader.is_alive(), f"the watch still hangs after {elapsed:.1f} s"
    finally:
        silent_proxy.close()  # unblocks a hung reader
        client.close()
    (error,) = outcome
    assert isinstance(error, KubeError), f"the watch ended with {error!r}, not a KubeError"
    assert error.kind == "timeout", error.message
    assert error.message == "watching pods: the API server did not answer in time"
