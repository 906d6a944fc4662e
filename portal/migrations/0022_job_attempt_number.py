"""Job.attempt_number: which run a job is on, so each run's Volcano Job has a name of its own.

Jobs requeued before this migration get the number their archived runs imply. A job whose
current run was created under the old name keeps it where it matters: its record
(``VolcanoJobRecord``) names the object, and its pods carry no attempt label, which every
reader takes as "any attempt"."""

from django.db import migrations, models

NUMBER_FROM_ARCHIVED_RUNS = """
UPDATE portal_job SET attempt_number = 1 + (
    SELECT COUNT(*) FROM portal_jobattempt a WHERE a.job_id = portal_job.id
)
WHERE EXISTS (SELECT 1 FROM portal_jobattempt a WHERE a.job_id = portal_job.id)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0021_job_queued_by_team_owner"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="attempt_number",
            field=models.PositiveIntegerField(
                default=1,
                help_text="Which run of the job this is: 1, then one more per requeue (the "
                "JobAttempt rows are the runs before it). It names the run's Volcano Job",
            ),
        ),
        migrations.RunSQL(NUMBER_FROM_ARCHIVED_RUNS, migrations.RunSQL.noop),
    ]
