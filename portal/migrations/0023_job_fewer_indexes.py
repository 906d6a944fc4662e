"""Five indexes fewer on the job table: every insert (a submit) and every update that cannot be
HOT (the cycle's admissions; its rewrite of waiting reasons, which was never HOT while the
notes key it changes was indexed) writes each index of the table.

- ``team_id`` and ``owner_id``: their foreign keys' own indexes, which the newest-first
  indexes (``job_team_newest``, ``job_owner_newest``) already lead with.
- ``pending_notes_id`` (three: the key's, its ``LIKE`` twin, and the partial one of queued
  jobs): a job's notes are only ever joined from the job; the notes pruning, every ten minutes,
  reads the queued jobs anyway.

The indexes are dropped by name, and the foreign keys' constraints left as they are (Django
would drop and re-add each, validating every row of the table again under its lock).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

DROPPED = (
    "portal_job_owner_id_6dce0010",
    "portal_job_team_id_f8d0ec6d",
    "portal_job_pending_notes_id_28bcfe2a",
    "portal_job_pending_notes_id_28bcfe2a_like",
)


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0022_job_attempt_number"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveIndex(model_name="job", name="job_queued_by_notes"),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="job",
                    name="owner",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                migrations.AlterField(
                    model_name="job",
                    name="pending_notes",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        help_text="The last cycle's note per candidate model (shared by equal "
                        "waits)",
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="portal.pendingnotes",
                    ),
                ),
                migrations.AlterField(
                    model_name="job",
                    name="team",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="jobs",
                        to="portal.team",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(f'DROP INDEX IF EXISTS "{name}"', migrations.RunSQL.noop)
                for name in DROPPED
            ],
        ),
    ]
