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
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.db import connection

from clusters.models import Cluster
from clusters.secrets import SecretMaterial, credentials_seal, secret_hint
from clusters.services import cluster_test
from portal.jobs.services import job_cancel
from portal.models import Job, JobState
from tests.clusters.conftest import dispatch, wait_state

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


def test_a_full_run_leaves_no_secret_in_the_database_logs_or_task_arguments(
    sim, cluster, admit, bob, celery_worker, caplog
):
    published: list[tuple[str, object]] = []

    def record(sender=None, body=None, **_):
        published.append((sender, body[0] if isinstance(body, tuple | list) else body))

    before_task_publish.connect(record, weak=False)
    cert_pem, key_pem = _client_cert()
    key_body = "".join(key_pem.splitlines()[1:-1])
    material = SecretMaterial(client_cert_pem=cert_pem, client_key_pem=key_pem)
    Cluster.objects.create(
        name="with-cert",
        api_url="https://gpu.example.org",
        auth_method="client-certificate",
        credentials=credentials_seal(material),
        credential_hint=secret_hint(material),
    )
    try:
        with caplog.at_level(logging.DEBUG):
            assert cluster_test(cluster=cluster).ok
            job = admit(cluster)
            dispatch(job)
            wait_state(job, JobState.SUBMITTED)
            other = admit(cluster)
            dispatch(other)
            wait_state(other, JobState.SUBMITTED)
            job_cancel(job=Job.objects.get(pk=other.pk), by=bob)
            wait_state(other, JobState.CANCELLED)
            sim.faults.add(verb="create", resource="jobs", status=401, count=1)
            failing = admit(cluster)
            dispatch(failing)
            wait_state(failing, JobState.FAILED)
    finally:
        before_task_publish.disconnect(record)
    secrets = [sim.token, base64.b64encode(sim.token.encode()).decode(), key_body]
    dump = _dump()
    assert "gpupool" in dump  # the dump is real
    for secret in secrets:
        assert secret not in dump
        assert secret not in caplog.text
        assert secret not in celery_worker.output()
    assert "Task clusters.dispatch_job" in celery_worker.output()
    clusters_tasks = [(name, args) for name, args in published if str(name).startswith("clusters.")]
    assert clusters_tasks
    assert all(
        isinstance(a, list | tuple) and all(isinstance(x, int) for x in a)
        for _, a in clusters_tasks
    ), clusters_tasks
