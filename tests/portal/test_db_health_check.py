"""The per-request database health check: a connection the server dropped is replaced before the
request's first query, and a healthy one is not sent a ``SELECT 1`` (``portal/pgbackend``)."""

from __future__ import annotations

import pytest
from django.core.signals import request_finished, request_started
from django.db import connection

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's backend"),
]


def backend_pid() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return int(cur.fetchone()[0])


def next_request() -> None:
    """The end of one request and the start of the next, through Django's own signals."""
    request_finished.send(sender=None)
    request_started.send(sender=None)


def test_a_connection_the_server_dropped_is_replaced_before_the_next_request_uses_it(admin):
    connection.close()
    dropped = backend_pid()
    # With a timeout it returns once the backend is gone (its FATAL written, the socket closed).
    admin.execute("SELECT pg_terminate_backend(%s, 10000)", [dropped])
    next_request()
    assert backend_pid() != dropped  # no error: the request ran on a new connection


def test_a_healthy_connection_is_not_sent_a_select_1_per_request(admin):
    connection.close()
    pid = backend_pid()
    for _ in range(3):
        next_request()
        connection.close_if_health_check_failed()  # what the request's first query does first
    assert connection.health_check_done
    last = admin.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    assert last == ("SELECT pg_backend_pid()",)
    assert backend_pid() == pid
