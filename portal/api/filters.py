"""Job list filters; they only ever narrow ``jobs_visible_to(user)``, never widen it."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db.models import Q, QuerySet

from portal.models import RESTARTING_PHASES, Job, JobKind, JobState

RESTARTING = "RESTARTING"
STATUS_CHOICES = [*JobState.choices, (RESTARTING, "Restarting")]


class _TrueOrFalse(forms.NullBooleanField):
    """``true``/``false`` (or ``1``/``0``); anything else is an error, not "no filter"."""

    widget = forms.TextInput  # NullBooleanSelect would read "null" or "abc" as unset

    def to_python(self, value: Any) -> bool | None:
        if value in (None, ""):
            return None
        if value in ("true", "True", "1"):
            return True
        if value in ("false", "False", "0"):
            return False
        raise ValidationError("Must be true or false.", code="invalid")


class FlagFilter(django_filters.BooleanFilter):
    field_class = _TrueOrFalse


class StrictFilterSet(django_filters.FilterSet):
    """A filter given empty (``?kind=``) or, where one value is expected, twice is a 400 naming
    it, as the schema says; django-filter would read the first as "no filter" and the second
    as its last value."""

    def is_valid(self) -> bool:
        valid = super().is_valid()
        for name, declared in self.filters.items():
            values = self.data.getlist(name) if hasattr(self.data, "getlist") else []
            if any(value == "" for value in values):
                self.form.add_error(name, "May not be empty; leave the parameter out instead.")
            elif len(values) > 1 and not isinstance(declared, django_filters.MultipleChoiceFilter):
                self.form.add_error(name, "Give this parameter once.")
        return valid and not self.form.errors


class JobFilter(StrictFilterSet):
    team = django_filters.CharFilter(
        field_name="team__slug", validators=[validate_slug], help_text="Team slug"
    )
    # distinct=False: state is a plain column; DISTINCT would sort every matching row.
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices, distinct=False)
    status = django_filters.MultipleChoiceFilter(
        choices=STATUS_CHOICES,
        method="filter_status",
        help_text="What the job is doing now (the `status` field): a state, or RESTARTING for "
        "a RUNNING job whose gang waits to be placed again; RUNNING then means running now",
    )
    kind = django_filters.ChoiceFilter(choices=JobKind.choices)
    mine = FlagFilter(method="filter_mine", help_text="Only my own jobs")

    class Meta:
        model = Job
        fields = ["team", "state", "status", "kind", "mine"]

    def filter_status(self, queryset: QuerySet[Job], name: str, value: list[str]) -> QuerySet[Job]:
        """The same rule as ``Job.status``, as one condition on the job and its record."""
        if not value:
            return queryset
        restarting = Q(state=JobState.RUNNING, volcano__phase__in=RESTARTING_PHASES)
        wanted = Q(state__in=[v for v in value if v not in (RESTARTING, JobState.RUNNING)])
        if RESTARTING in value:
            wanted |= restarting
        if JobState.RUNNING in value:
            wanted |= Q(state=JobState.RUNNING) & ~restarting
        return queryset.filter(wanted)

    def filter_mine(self, queryset: QuerySet[Job], name: str, value: bool) -> QuerySet[Job]:
        return queryset.filter(owner_id=self.request.user.pk) if value else queryset
