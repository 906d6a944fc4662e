"""Earlier attempts of a job (placement, end) and the logs kept when their pods were deleted."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0008_job_cancel_reason_and_preemption_count'),
    ]

    operations = [
        migrations.CreateModel(
            name='JobAttempt',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('number', models.PositiveIntegerField(help_text='1 for the first run')),
                ('cluster_name', models.CharField(blank=True, max_length=100)),
                ('gpu_model_key', models.CharField(blank=True, max_length=64)),
                ('node_plan', models.JSONField(blank=True, default=list)),
                ('placement', models.JSONField(blank=True, default=dict)),
                ('volcano_job_name', models.CharField(blank=True, max_length=63)),
                ('admitted_at', models.DateTimeField(blank=True, null=True)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('ended_at', models.DateTimeField()),
                ('end_reason', models.CharField(max_length=64)),
                ('end_message', models.TextField(blank=True)),
                ('job', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='attempts', to='portal.job')),
            ],
            options={
                'ordering': ['job', 'number'],
                'constraints': [models.UniqueConstraint(fields=('job', 'number'), name='one_attempt_per_number')],
            },
        ),
        migrations.CreateModel(
            name='AttemptLog',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('attempt', models.PositiveIntegerField()),
                ('replica', models.PositiveIntegerField()),
                ('pod', models.CharField(max_length=253)),
                ('text', models.TextField(blank=True)),
                ('message', models.TextField(blank=True, help_text='Why there is no text, when there is none')),
                ('captured_at', models.DateTimeField()),
                ('job', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='kept_logs', to='portal.job')),
            ],
            options={
                'ordering': ['job', 'attempt', 'replica'],
                'constraints': [models.UniqueConstraint(fields=('job', 'attempt', 'replica'), name='one_kept_log_per_replica')],
            },
        ),
    ]
