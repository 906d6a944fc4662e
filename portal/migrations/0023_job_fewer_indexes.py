"""Five indexes fewer on the job table: every insert (a submit) and every update that cannot be
HOT (the cycle's admissions; its rewrite of waiting reasons, which was never HOT while the
notes key it changes was indexed) writes each index of the table.

- ``team_id`` and ``owner_id``: their foreign keys' own indexes, which the newest-first
  indexes (``job_team_newest``, ``job_owner_newest``) already lead with.
- ``pending_notes_id`` (three: the key's, its ``LIKE`` twin, and the partial one of queued
  jobs): a job's notes are only ever joined from the job; the notes pruning, every ten minutes,
  reads the queued jobs anyway.

The indexes are dropped by name, and the foreign keys' constraints left as they are (Django
would drop and re-add each, validating every row of the table again under its lock). On
PostgreSQL each goes ``CONCURRENTLY``, outside a transaction, so the drop never waits for a
long read of the job table while every other query of it waits for the drop. Reversed, they
are made again.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# name → (columns, PostgreSQL only)
DROPPED = {
    "job_queued_by_notes": ('("pending_notes_id") WHERE "state" = \'QUEUED\'', False),
    "portal_job_owner_id_6dce0010": ('("owner_id")', False),
    "portal_job_team_id_f8d0ec6d": ('("team_id")', False),
    "portal_job_pending_notes_id_28bcfe2a": ('("pending_notes_id")', False),
    "portal_job_pending_notes_id_28bcfe2a_like": ('("pending_notes_id" varchar_pattern_ops)', True),
}


def _run(schema_editor, sql: str) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(sql)


def drop(apps, schema_editor) -> None:
    concurrently = " CONCURRENTLY" if schema_editor.connection.vendor == "postgresql" else ""
    for name in DROPPED:
        _run(schema_editor, f'DROP INDEX{concurrently} IF EXISTS "{name}"')


def make_again(apps, schema_editor) -> None:
    postgresql = schema_editor.connection.vendor == "postgresql"
    for name, (columns, postgresql_only) in DROPPED.items():
        if postgresql or not postgresql_only:
            _run(schema_editor, f'CREATE INDEX IF NOT EXISTS "{name}" ON "portal_job" {columns}')


class Migration(migrations.Migration):
    atomic = False  # DROP INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("portal", "0022_job_attempt_number"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="job", name="job_queued_by_notes"),
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
            database_operations=[migrations.RunPython(drop, make_again)],
        ),
    ]
