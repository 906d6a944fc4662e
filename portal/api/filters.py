"""Job list filters; they only ever narrow ``jobs_visible_to(user)``, never widen it."""

from __future__ import annotations

import django_filters
from django.core.validators import validate_slug
from django.db.models import QuerySet

from portal.models import Job, JobKind, JobState


class JobFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(
        field_name="team__slug", validators=[validate_slug], help_text="Team slug"
    )
    # distinct=False: state is a plain column; DISTINCT would sort every matching row.
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices, distinct=False)
    kind = django_filters.ChoiceFilter(choices=JobKind.choices)
    mine = django_filters.BooleanFilter(method="filter_mine", help_text="Only my own jobs")

    class Meta:
        model = Job
        fields = ["team", "state", "kind", "mine"]

    def filter_mine(self, queryset: QuerySet[Job], name: str, value: bool) -> QuerySet[Job]:
        return queryset.filter(owner_id=self.request.user.pk) if value else queryset
