"""Each delivery gets its idempotency id (``Delivery.key``) and a count of the times it was
sent again after a worker stopped mid-send (``retries_in_doubt``): a send in doubt is now
retried under the same id instead of being given up.

The key is added in three steps so that every existing row gets its own UUID (a field
default is evaluated once for the whole table). Rows given up before this change
(``unknown``, "worker_stopped") keep their meaning under the new category ``in_doubt``: the
old category now says "sent again", which they never were.
"""

import uuid

from django.db import migrations, models


def keys_fill(apps, schema_editor):
    Delivery = apps.get_model("notifications", "Delivery")
    for pk in Delivery.objects.filter(key__isnull=True).values_list("pk", flat=True).iterator():
        Delivery.objects.filter(pk=pk).update(key=uuid.uuid4())


def given_up_recategorize(apps, schema_editor):
    Delivery = apps.get_model("notifications", "Delivery")
    Delivery.objects.filter(state="unknown", error="worker_stopped").update(error="in_doubt")


def given_up_restore(apps, schema_editor):
    Delivery = apps.get_model("notifications", "Delivery")
    Delivery.objects.filter(error="in_doubt").update(error="worker_stopped")


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0002_delivery_error_category"),
    ]

    operations = [
        migrations.AddField(
            model_name="delivery",
            name="key",
            field=models.UUIDField(null=True, editable=False),
        ),
        migrations.RunPython(keys_fill, migrations.RunPython.noop, elidable=True),
        migrations.AlterField(
            model_name="delivery",
            name="key",
            field=models.UUIDField(
                default=uuid.uuid4,
                editable=False,
                help_text="The idempotency id: Idempotency-Key of a webhook, Message-ID of an "
                "e-mail",
                unique=True,
            ),
        ),
        migrations.AddField(
            model_name="delivery",
            name="retries_in_doubt",
            field=models.PositiveSmallIntegerField(
                default=0,
                help_text="Times it was sent again after a worker stopped mid-send (the earlier "
                "try may have arrived too, under the same idempotency id)",
            ),
        ),
        migrations.AlterField(
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
                        "the worker stopped while sending (it may have arrived); sent again "
                        "with the same id",
                    ),
                    (
                        "in_doubt",
                        "the worker stopped while sending and no retry is left (it may have "
                        "arrived)",
                    ),
                    ("other", "failed"),
                ],
                max_length=16,
            ),
        ),
        migrations.RunPython(given_up_recategorize, given_up_restore, elidable=True),
    ]
