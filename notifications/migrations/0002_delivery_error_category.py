"""A delivery's error becomes a category (``Delivery.error``, plus the status of an HTTP
answer) instead of free text; rows written before keep only the category their text shows.

The old text could carry what a webhook's remote or the network said (the refused address a
host name resolved to, the mail server's answer); team admins read it, so it is reduced here
rather than kept beside the new fields.
"""

import re

from django.db import migrations, models

_STATUS = re.compile(r"the webhook answered (\d{3})\b")
# Old wording (notifications/channels.py before this migration) → category, first match wins.
_BY_TEXT = (
    ("your account has no email address", "no_email"),
    ("the mail server refused or did not answer", "mail"),
    ("the webhook was removed or switched off", "removed"),
    ("the worker stopped while sending", "worker_stopped"),
    ("cannot be decrypted", "secret"),
    ("has no stored credentials", "secret"),
    ("GPUPOOL_SECRET_KEYS", "secret"),
    ("does not resolve", "dns"),
    ("the webhook URL is refused", "blocked"),
    ("the webhook did not answer: ConnectTimeout", "timeout"),
    ("the webhook did not answer: ReadTimeout", "timeout"),
    ("the webhook did not answer: Timeout", "timeout"),
    ("the webhook did not answer: SSLError", "tls"),
    ("the webhook did not answer: ConnectionError", "connection"),
)


def category_of(text: str) -> tuple[str, int | None]:
    """The category (and HTTP status) an old ``last_error`` text stands for."""
    if not text:
        return "", None
    status = _STATUS.search(text)
    if status:
        return "http", int(status.group(1))
    for needle, category in _BY_TEXT:
        if needle in text:
            return category, None
    return "other", None


def reduce_errors(apps, schema_editor):
    Delivery = apps.get_model("notifications", "Delivery")
    rows = Delivery.objects.exclude(last_error="").only("pk", "last_error")
    for row in rows.iterator(chunk_size=2000):
        error, status = category_of(row.last_error)
        Delivery.objects.filter(pk=row.pk).update(error=error, error_status=status)


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="delivery",
            name="error",
            field=models.CharField(
                blank=True,
                choices=[
                    ("refused", "connection refused"),
                    ("timeout", "timed out"),
                    ("tls", "TLS error"),
                    ("dns", "host name does not resolve"),
                    ("connection", "connection failed"),
                    ("blocked", "blocked address"),
                    ("http", "HTTP error"),
                    ("removed", "webhook removed or switched off"),
                    ("secret", "webhook secret unreadable"),
                    ("no_email", "your account has no email address"),
                    ("mail", "mail server refused or did not answer"),
                    (
                        "worker_stopped",
                        "the worker stopped while sending; not sent again, so that it never "
                        "arrives twice (it may have arrived once)",
                    ),
                    ("other", "failed"),
                ],
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="delivery",
            name="error_status",
            field=models.PositiveSmallIntegerField(
                blank=True, help_text="The HTTP status of a webhook's error answer", null=True
            ),
        ),
        migrations.RunPython(reduce_errors, migrations.RunPython.noop, elidable=True),
        migrations.RemoveField(
            model_name="delivery",
            name="last_error",
        ),
    ]
