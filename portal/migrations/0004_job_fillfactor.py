"""Leave a third of each job page free, so the scheduler's per-cycle writes are HOT updates.

Every cycle rewrites the pending reason and position of thousands of queued jobs. None of those
columns is indexed, so PostgreSQL can keep the new row version on the same page and skip the
table's eleven indexes (a heap-only tuple update), but only when the page has room; with the
default fill factor of 100 it never has. See docs/decisions.md.
"""

from django.db import migrations

FILLFACTOR = 70


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE portal_job SET (fillfactor = {FILLFACTOR})")


def reset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE portal_job RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("portal", "0003_job_usage_accounted_until")]

    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor, elidable=False)]
