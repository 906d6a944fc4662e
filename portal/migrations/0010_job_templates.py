"""Named job templates: personal, per team, and built-in."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0009_job_attempts_and_kept_logs'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='JobTemplate',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100)),
                ('description', models.TextField(blank=True)),
                ('scope', models.CharField(choices=[('builtin', 'Built-in'), ('team', 'Team'), ('personal', 'Mine')], max_length=16)),
                ('key', models.SlugField(blank=True, help_text='Built-ins: id in the data', max_length=64, null=True, unique=True)),
                ('spec', models.JSONField(blank=True, default=dict)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('owner', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='job_templates', to=settings.AUTH_USER_MODEL)),
                ('team', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='job_templates', to='portal.team')),
            ],
            options={
                'ordering': ['scope', 'name', 'id'],
                'constraints': [models.CheckConstraint(condition=models.Q(models.Q(('key__isnull', False), ('owner__isnull', True), ('scope', 'builtin'), ('team__isnull', True)), models.Q(('owner__isnull', True), ('scope', 'team'), ('team__isnull', False)), models.Q(('owner__isnull', False), ('scope', 'personal'), ('team__isnull', False)), _connector='OR'), name='jobtemplate_scope_fields'), models.UniqueConstraint(condition=models.Q(('scope', 'team')), fields=('team', 'name'), name='one_team_template_per_name'), models.UniqueConstraint(condition=models.Q(('scope', 'personal')), fields=('owner', 'team', 'name'), name='one_personal_template_per_name')],
            },
        ),
    ]
