"""A registration that crashes must not mail the cluster's token to the admins.

Django mails a report of every 500 to ``ADMINS`` (and error trackers read the same data): the
request's POST and every frame's local variables. The crash here is a real misconfiguration
(``GPUPOOL_SECRET_KEYS`` empty, so the token cannot be sealed) hit after the token has been
posted and parsed; the report must still say what broke, and never carry the token.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from django.core import mail
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils.log import AdminEmailHandler

from clusters.models import Cluster
from tests.clusters.conftest import kubeconfig_text

pytestmark = pytest.mark.django_db

HIDDEN = "********************"  # SafeExceptionReporterFilter's substitute


@pytest.fixture
def error_mails(settings: Any) -> Any:
    """Production reporting: DEBUG off, ADMINS set, the full (HTML) report mailed as well."""
    import logging

    settings.DEBUG = False
    settings.ADMINS = [("Ops", "ops@example.org")]
    settings.GPUPOOL_SECRET_KEYS = []  # the crash: sealing the credentials fails
    handler = AdminEmailHandler(include_html=True)
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    mail.outbox.clear()
    yield mail.outbox
    logger.removeHandler(handler)


def _reports(outbox: list[Any]) -> tuple[str, str]:
    """The text and HTML of the report mailed with the full traceback."""
    mailed = [m for m in outbox if m.alternatives]
    assert mailed, [m.subject for m in outbox]
    return mailed[0].body, mailed[0].alternatives[0][0]


def _assert_says_what_broke_without_the_token(outbox: list[Any], token: str) -> None:
    text, html = _reports(outbox)
    for report in (text, html):
        assert "GPUPOOL_SECRET_KEYS is empty" in report  # a real report of this crash
        assert "cluster_register" in report
        assert token not in report
        assert base64.b64encode(token.encode()).decode() not in report
    assert "Local Vars" in html and HIDDEN in html  # frames are there, their variables hidden


# The admin's add form, less the connection: each test adds a token or an upload.
ADMIN_OPTIONS = {
    "name": "adm",
    "state": "enabled",
    "namespace": "gpupool",
    "scheduler_name": "volcano",
    "gpu_label": "gpu-type",
    "command_namespace": "gpupool-system",
}


def test_the_admin_error_report_hides_the_posted_token(sim, catalog, client, root, error_mails):
    client.force_login(root)
    client.raise_request_exception = False
    answer = client.post(
        "/admin/clusters/cluster/add/",
        {
            **ADMIN_OPTIONS,
            "new_api_url": sim.url,
            "token": sim.token,
            "new_ca_pem": sim.ca_pem.decode(),
        },
    )
    assert answer.status_code == 500
    assert not Cluster.objects.exists()
    _assert_says_what_broke_without_the_token(error_mails, sim.token)
    text, _ = _reports(error_mails)
    assert f"token = '{HIDDEN}'" in text  # the POST is there, its secret replaced


def test_the_admin_error_report_hides_an_uploaded_kubeconfig(
    sim, catalog, client, root, error_mails
):
    client.force_login(root)
    client.raise_request_exception = False
    upload = SimpleUploadedFile("kubeconfig", kubeconfig_text(sim).encode())
    answer = client.post(
        "/admin/clusters/cluster/add/",
        {
            **ADMIN_OPTIONS,
            "kubeconfig": upload,
        },
    )
    assert answer.status_code == 500
    _assert_says_what_broke_without_the_token(error_mails, sim.token)


@pytest.mark.parametrize("fmt", ["json", "multipart"])
@pytest.mark.parametrize("credential", ["token", "kubeconfig"])
def test_the_rest_error_report_hides_the_posted_credentials(
    sim, catalog, api_as, root, error_mails, fmt, credential
):
    body = (
        {"name": "rest", "api_url": sim.url, "token": sim.token, "ca_pem": sim.ca_pem.decode()}
        if credential == "token"
        else {"name": "rest", "kubeconfig": kubeconfig_text(sim)}
    )
    client = api_as(root)
    client.raise_request_exception = False
    answer = client.post("/api/v1/clusters/", body, format=fmt)
    assert answer.status_code == 500
    assert not Cluster.objects.exists()
    _assert_says_what_broke_without_the_token(error_mails, sim.token)
