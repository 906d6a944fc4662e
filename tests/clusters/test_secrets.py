"""Credentials never leak: not in the database in clear, not in logs, not in task arguments."""

from __future__ import annotations

import base64
import datetime as dt
import logging
import shutil
import subprocess

import pytest
from celery.signals import before_task_publish
from cryptography import x509
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.db import connection

from clusters.connection_test import cluster_test
from clusters.models import Cluster
from clusters.secrets import SecretMaterial, credentials_open, credentials_seal, secret_hint
from clusters.tasks import sync_inventory
from portal.jobs.services import job_cancel
from portal.models import Job, JobState
from tests.clusters.conftest import (
    TEST_KEYS,
    _database_url,
    dispatch,
    wait_deleted,
    wait_for,
    wait_state,
)
from tests.test_deployment import _manage

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


def _client_cert() -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "portal")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem


def _dump() -> str:
    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:  # read every text column instead
        return _every_text_column()
    s = connection.settings_dict
    env = {"PGPASSWORD": s.get("PASSWORD") or ""}
    out = subprocess.run(
        [pg_dump, "--data-only", "-h", s.get("HOST") or "127.0.0.1", "-p", str(s.get("PORT") or
         5432), "-U", s.get("USER") or "postgres", s["NAME"]],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    return out.stdout


def _every_text_column() -> str:
    from django.apps import apps

    chunks = []
    for model in apps.get_models():
        for row in model.objects.all().values():
            chunks.extend(str(v) for v in row.values())
    return "\n".join(chunks)


def _pieces(secret: str, size: int = 16, step: int = 4) -> list[str]:
    """``secret`` and runs of ``size`` characters of it: any run of ``size + step`` characters
    of it holds one, so a secret shown in part is caught too."""
    return [secret, *(secret[i : i + size] for i in range(0, len(secret) - size + 1, step))]


def _key_material(key_pem: str) -> list[str]:
    """Every form in which a client key could leak: its PEM body whole and line by line, any
    16 characters of the private number's part of it (a message cut short, or cut across a
    line break), and the private number itself in decimal, hex and base64."""
    lines = key_pem.splitlines()[1:-1]
    body = "".join(lines)
    key = serialization.load_pem_private_key(key_pem.encode(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    number = key.private_numbers().private_value
    raw = number.to_bytes(32, "big")
    # PKCS#8 of a P-256 key: 36 bytes of header, the same in every such key (and partly in
    # every EC certificate, so not secret), then the private number: base64 characters 48-90.
    assert base64.b64decode(body)[36:68] == raw
    return [body, *lines, *_pieces(body[48:90]), str(number), f"{number:x}",
            base64.b64encode(raw).decode()]  # fmt: skip


def test_a_full_run_leaves_no_secret_in_the_database_logs_or_task_arguments(
    sim, cluster, admit, bob, celery_worker, caplog
):
    published: list[tuple[str, object]] = []

    def record(sender=None, body=None, **_):
        published.append((sender, body[0] if isinstance(body, tuple | list) else body))

    before_task_publish.connect(record, weak=False)
    cert, key = sim.client_certificate("portal-without-grants", role=None)
    cert_pem, key_pem = cert.decode(), key.decode()
    material = SecretMaterial(client_cert_pem=cert_pem, client_key_pem=key_pem)
    # A second cluster, on the same kubesim, reached with a client certificate whose user was
    # granted nothing, so every request is refused with 403: the certificate's client is built
    # (key handed to ssl) and used, here and in the worker, and its failures are reported
    # without the key.
    with_cert = Cluster.objects.create(
        name="with-cert",
        api_url=sim.url,
        ca_pem=sim.ca_pem.decode(),
        auth_method="client-certificate",
        credentials=credentials_seal(material),
        credential_hint=secret_hint(material),
    )
    try:
        with caplog.at_level(logging.DEBUG):
            cert_report = cluster_test(cluster=with_cert)
            assert not cert_report.ok
            assert cert_report.version  # TLS with the certificate's client worked
            assert cert_report.summary.startswith("403 Forbidden"), cert_report.summary
            assert "portal-without-grants" in cert_report.summary  # authenticated as its CN
            sync_inventory.delay(with_cert.pk)  # the worker builds its own client from the row
            error = wait_for(
                lambda: Cluster.objects.values_list("inventory_error", flat=True).get(
                    pk=with_cert.pk
                )
            )
            assert "403 Forbidden" in error, error
            assert cluster_test(cluster=cluster).ok
            job = admit(cluster)
            dispatch(job)
            wait_state(job, JobState.SUBMITTED)
            other = admit(cluster)
            dispatch(other)
            wait_state(other, JobState.SUBMITTED)
            job_cancel(job=Job.objects.get(pk=other.pk), by=bob)
            wait_deleted(sim, other, JobState.CANCELLED)
            # Refused credentials: the cluster is marked unreachable and the create retried
            # (no job fails for it); the refusal's logs must not carry the token either.
            refused = sim.faults.add(verb="create", resource="jobs", status=401, count=1)
            failing = admit(cluster)
            dispatch(failing)
            wait_state(failing, JobState.SUBMITTED)
            assert refused.hits == 1
    finally:
        before_task_publish.disconnect(record)
    secrets = [sim.token, base64.b64encode(sim.token.encode()).decode(), *_key_material(key_pem)]
    dump = _dump()
    assert "gpupool" in dump  # the dump is real
    assert "portal-without-grants" in dump  # the certificate cluster's failures are in it
    assert "Task clusters.sync_inventory" in celery_worker.output()
    reported = "\n".join([cert_report.summary, *(c.message for c in cert_report.checks), error])
    for secret in secrets:
        assert secret not in dump
        assert secret not in caplog.text
        assert secret not in celery_worker.output()
        assert secret not in reported
    assert "Task clusters.dispatch_job" in celery_worker.output()
    clusters_tasks = [(name, args) for name, args in published if str(name).startswith("clusters.")]
    assert clusters_tasks
    assert all(
        isinstance(a, list | tuple) and all(isinstance(x, int) for x in a)
        for _, a in clusters_tasks
    ), clusters_tasks


def test_rotating_keys_with_a_row_no_key_opens_names_it_and_reseals_the_others(settings):
    """An operator put a new key first, kept the previous one second, but one cluster was
    sealed under a key that is gone from ``GPUPOOL_SECRET_KEYS`` altogether.

    What the command does, and what a careful operator can rely on: every row a configured key
    opens is resealed under the new key (each row stands alone, and resealing under the first
    key keeps it readable with the keys configured now, so there is nothing to roll back),
    the unreadable row is left exactly as it was (it may still open once the lost key is
    restored), and the run exits non-zero naming that cluster, with the count of the others,
    so it is never mistaken for a complete rotation. No secret and no key is printed.
    """
    lost_key = Fernet.generate_key().decode()
    tokens = {name: Fernet.generate_key().decode() for name in ("alpha", "lost", "zeta")}
    sealed = {}
    for name, token in tokens.items():  # "lost" sorts between the two others
        settings.GPUPOOL_SECRET_KEYS = [lost_key] if name == "lost" else [TEST_KEYS[1]]
        sealed[name] = credentials_seal(SecretMaterial(token=token))
        Cluster.objects.create(name=name, api_url="https://gpu.example.org",
                               credentials=sealed[name])  # fmt: skip

    keys = [TEST_KEYS[0], TEST_KEYS[1]]  # the new key first, the previous one second
    result = _manage(
        "rotate_cluster_keys",
        env={"DATABASE_URL": _database_url(), "GPUPOOL_SECRET_KEYS": ",".join(keys)},
        unset=("GPUPOOL_SECRET_KEYS",),  # and GPUPOOL_SECRET_KEYS_FILE, which would win
    )
    output = result.stdout + result.stderr

    assert result.returncode != 0, output
    assert "CommandError: no configured key opens the credentials of: lost " in result.stderr
    assert "alpha" not in result.stderr and "zeta" not in result.stderr
    assert "re-encrypted the credentials of 2 cluster(s)" in result.stdout
    for secret in [*tokens.values(), lost_key, *keys]:
        for piece in _pieces(secret):
            assert piece not in output
    rows = dict(Cluster.objects.values_list("name", "credentials"))
    assert rows["lost"] == sealed["lost"]  # untouched, byte for byte
    settings.GPUPOOL_SECRET_KEYS = [TEST_KEYS[0]]  # the previous key can go now
    for name in ("alpha", "zeta"):
        assert rows[name] != sealed[name]
        assert credentials_open(rows[name], cluster_name=name).token == tokens[name]
    settings.GPUPOOL_SECRET_KEYS = [lost_key]  # found again: the row was not damaged
    assert credentials_open(rows["lost"]).token == tokens["lost"]
