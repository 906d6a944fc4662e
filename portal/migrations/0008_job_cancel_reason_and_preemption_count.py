"""A job keeps why it was cancelled and how often it was preempted."""

from django.db import migrations, models


def count_past_preemptions(apps, schema_editor):
    """Jobs preempted before the counter existed get the count their timeline shows."""
    Job = apps.get_model("portal", "Job")
    JobEvent = apps.get_model("portal", "JobEvent")
    rows = (
        JobEvent.objects.filter(to_state="PREEMPTING", reason="Preempted")
        .exclude(from_state="PREEMPTING")
        .values("job_id")
        .annotate(n=models.Count("id"))
    )
    for row in rows.iterator():
        Job.objects.filter(pk=row["job_id"]).update(preemption_count=row["n"])


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0007_job_env_from_secrets'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='cancel_reason',
            field=models.TextField(blank=True, help_text='Why it was cancelled, in the words of whoever cancelled it'),
        ),
        migrations.AddField(
            model_name='job',
            name='preemption_count',
            field=models.PositiveIntegerField(default=0, help_text='Times the scheduler preempted it to reclaim quota (and requeued it)'),
        ),
        migrations.RunPython(count_past_preemptions, migrations.RunPython.noop),
    ]
