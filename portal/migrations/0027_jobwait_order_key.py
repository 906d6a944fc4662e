"""A queued job's place in line becomes a sort key (``JobWait.order_key``).

The ranks stored so far already sort the queue in the last cycle's order, so they are kept as
the first keys; the next cycle spreads new keys into the gaps as it needs them.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0026_job_device_plan"),
    ]

    operations = [
        migrations.RenameField(model_name="jobwait", old_name="position", new_name="order_key"),
        migrations.AlterField(
            model_name="jobwait",
            name="order_key",
            field=models.BigIntegerField(
                blank=True,
                help_text=(
                    "Sorts the queue in the last cycle's order (smaller first); null: not ranked"
                ),
                null=True,
            ),
        ),
    ]
