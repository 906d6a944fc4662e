"""Django's PostgreSQL backend, its per-request health check made local.

With ``CONN_HEALTH_CHECKS`` Django sends ``SELECT 1`` before the first query of every request
on a reused connection: a round trip that was a sixth of a REST submit's time. What the check
is there for is a connection whose server went away (a restart, a failover, an idle timeout,
``pg_terminate_backend``): the server then says so on the socket, a FATAL message and the
close, and the socket of a connection with no query in flight turns readable. A healthy idle
connection has nothing to read (psycopg reads every reply up to ReadyForQuery). So the check
first asks the kernel, with a zero timeout, whether the socket has anything to read, and sends
``SELECT 1`` only when it has: a connection the server dropped is still replaced before the
request uses it, as with Django's own check, and a healthy one costs one system call.

What neither check catches is a peer that vanished without a word (a cable pulled): ``SELECT
1`` would hang there until the TCP timeout too; the outage middleware answers the request 503.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base


def _has_something_to_read(fileno: int) -> bool:
    """Whether the socket has bytes (or an end of file) waiting, without waiting."""
    poller = select.poll()
    poller.register(fileno, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


class DatabaseWrapper(base.DatabaseWrapper):
    def close_if_health_check_failed(self) -> None:
        """Django's check, its ``SELECT 1`` sent only when the server has spoken unasked."""
        if self.connection is None or not self.health_check_enabled or self.health_check_done:
            return
        try:
            suspect = self.connection.closed or _has_something_to_read(self.connection.fileno())
        except (OSError, ValueError, base.Database.Error):  # no socket left at all
            suspect = True
        if suspect and not self.is_usable():
            self.close()
        self.health_check_done = True
