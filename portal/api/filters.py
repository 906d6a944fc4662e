"""Job list filters; they only ever narrow ``jobs_visible_to(user)``, never widen it."""

from __future__ import annotations

import uuid
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


MIN_ID_PREFIX = 6


def id_prefix_range(value: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The lowest and highest id starting with ``value``'s hex digits; a ValidationError when
    it is not 6 to 32 hex digits (dashes allowed)."""
    digits = value.replace("-", "").lower()
    if not (MIN_ID_PREFIX <= len(digits) <= 32) or any(c not in "0123456789abcdef" for c in digits):
        raise ValidationError(
            f"Give {MIN_ID_PREFIX} to 32 hex digits of a job's id (dashes allowed).",
            code="invalid",
        )
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


def validate_id_prefix(value: str) -> None:
    id_prefix_range(value)


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
    name = django_filters.CharFilter(
        field_name="name", max_length=200, help_text="Jobs of exactly this name"
    )
    owner = django_filters.CharFilter(
        field_name="owner__username", max_length=150, help_text="Jobs of this user (a username)"
    )
    name_contains = django_filters.CharFilter(
        field_name="name",
        lookup_expr="icontains",
        max_length=100,
        help_text="Jobs whose name contains this text (any case), as Team jobs' search",
    )
    id_prefix = django_filters.CharFilter(
        method="filter_id_prefix",
        max_length=36,
        validators=[validate_id_prefix],
        help_text="Jobs whose id starts with these hex digits (6 or more; dashes allowed), as "
        "a person copies an id: `gpupool show 3f2a9c` finds the job by it",
    )

    class Meta:
        model = Job
        fields = [
            "team",
            "state",
            "status",
            "kind",
            "mine",
            "owner",
            "name",
            "name_contains",
            "id_prefix",
        ]

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

    def filter_id_prefix(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        """A range of ids, not a text match: the ids starting with the prefix are those between
        it padded with 0s and with fs, and that range reads the id's unique index."""
        low, high = id_prefix_range(value)
        return queryset.filter(public_id__gte=low, public_id__lte=high)
