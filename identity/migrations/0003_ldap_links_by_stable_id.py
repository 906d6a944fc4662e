"""LDAP links held the username; they now hold the directory entry's stable id
(identity/accounts.py). A link to an account with a usable local password is dropped, since it
was made by a name match (a takeover of a local account); every other link is marked
``legacy:<username>`` and re-keyed to the entry's id at that person's next sign-in."""

from django.contrib.auth.hashers import is_password_usable
from django.db import migrations, models


def forwards(apps, schema_editor):
    ExternalIdentity = apps.get_model("identity", "ExternalIdentity")
    MembershipAudit = apps.get_model("identity", "MembershipAudit")
    for link in ExternalIdentity.objects.filter(provider="ldap").select_related("user"):
        if link.subject.startswith(("legacy:", "dn:", "entryuuid:", "objectguid:")):
            continue
        if is_password_usable(link.user.password):
            MembershipAudit.objects.create(
                source="ldap",
                user=link.user,
                action="link-dropped",
                detail="an LDAP link by name to an account with a local password",
            )
            link.delete()
        else:
            link.subject = f"legacy:{link.subject.lower()}"
            link.save(update_fields=["subject"])


def backwards(apps, schema_editor):
    ExternalIdentity = apps.get_model("identity", "ExternalIdentity")
    for link in ExternalIdentity.objects.filter(provider="ldap", subject__startswith="legacy:"):
        link.subject = link.subject.removeprefix("legacy:")
        link.save(update_fields=["subject"])


class Migration(migrations.Migration):
    dependencies = [("identity", "0002_refresh_token")]

    operations = [
        migrations.AlterField(
            model_name="externalidentity",
            name="subject",
            field=models.CharField(max_length=512),
        ),
        migrations.RunPython(forwards, backwards),
    ]
