"""Leave half of each ``portal_jobwait`` page free (PostgreSQL's ``fillfactor``).

The cycle rewrites most of these rows every run (a queued job's place in line moves with every
admission ahead of it). With room on the page, the new version of a row stays there (a "HOT"
update: no new index entry, and the page prunes its dead versions itself), which made the
cycle's write of 9,000 waits about a third cheaper (docs/performance.md). SQLite has no such
setting; nothing to do there.
"""

from django.db import migrations


def _fillfactor(value: int):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"ALTER TABLE portal_jobwait SET (fillfactor = {value})")

    return apply


class Migration(migrations.Migration):
    dependencies = [("portal", "0024_job_wait")]

    operations = [migrations.RunPython(_fillfactor(50), _fillfactor(100), elidable=False)]
