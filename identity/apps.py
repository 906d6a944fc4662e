from django.apps import AppConfig


class IdentityConfig(AppConfig):
    name = "identity"
    verbose_name = "Identity and team membership"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from identity.signals import join_invited_teams

        # Whoever signs in with an invited e-mail address joins the team (identity.invitations).
        user_logged_in.connect(join_invited_teams, dispatch_uid="identity-join-invited-teams")
