"""A queued job's reason, position, notes key and closest model move to a narrow table beside
the job (``JobWait``): each cycle rewrites them for thousands of queued jobs, and a narrow row
costs a third of the job's 60-column one to rewrite. The queued jobs' values are copied over
first (and back, reversed), then the columns dropped.
"""

import django.db.models.deletion
from django.db import migrations, models


COPY_TO_WAITS = """
INSERT INTO portal_jobwait (job_id, code, reason, position, notes_id, model)
SELECT id, pending_reason_code, pending_reason, queue_position, pending_notes_id, pending_model
FROM portal_job WHERE state = 'QUEUED'
"""
COPY_BACK = """
UPDATE portal_job SET pending_reason_code = w.code, pending_reason = w.reason,
    queue_position = w.position, pending_notes_id = w.notes_id, pending_model = w.model
FROM portal_jobwait AS w WHERE w.job_id = portal_job.id
"""


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0023_job_fewer_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobWait",
            fields=[
                (
                    "job",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="wait",
                        serialize=False,
                        to="portal.job",
                    ),
                ),
                ("code", models.CharField(blank=True, max_length=40)),
                ("reason", models.TextField(blank=True)),
                ("position", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "model",
                    models.CharField(
                        blank=True,
                        help_text="Key of the closest candidate the job could get (the blocker that matters): wait statistics count the job under it",
                        max_length=64,
                    ),
                ),
                (
                    "notes",
                    models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        help_text="The last cycle's note per candidate model (shared by equal waits)",
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="portal.pendingnotes",
                    ),
                ),
            ],
        ),
        migrations.RunSQL(
            sql=COPY_TO_WAITS,
            reverse_sql=COPY_BACK,
        ),
        migrations.RemoveField(
            model_name="job",
            name="pending_model",
        ),
        migrations.RemoveField(
            model_name="job",
            name="pending_notes",
        ),
        migrations.RemoveField(
            model_name="job",
            name="pending_reason",
        ),
        migrations.RemoveField(
            model_name="job",
            name="pending_reason_code",
        ),
        migrations.RemoveField(
            model_name="job",
            name="queue_position",
        ),
    ]
