"""Django's PostgreSQL backend with a health check that costs no round trip while the server is
up (``portal.pgbackend.base``)."""
