"""Cursor pagination on the primary key: constant cost per page however many jobs exist."""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

_WHOLE_NUMBER = re.compile(r"[0-9]{1,9}")
INVALID_CURSOR = "Invalid cursor: use the next or previous link of a page as it is."


class CheckedCursorPagination(CursorPagination):
    """DRF's cursor pagination, with the cursor's position checked before it reaches a query.

    A cursor is base64 the client can forge: ``?cursor=cD1hYmM=`` is ``p=abc``, which DRF
    put into ``id < 'abc'`` and the database refused (a 500). The position must now be a value
    of the ordering's first field; any bad cursor is a 400 naming ``cursor`` (DRF said 404).
    """

    def get_page_size(self, request: Request) -> int:
        """``page_size`` from 1 to ``max_page_size``; anything else is a 400 naming it (DRF
        quietly used the default instead)."""
        raw = request.query_params.getlist(self.page_size_query_param)
        if not raw:
            return self.page_size
        if len(raw) > 1:
            raise ValidationError({self.page_size_query_param: ["Give this parameter once."]})
        if not _WHOLE_NUMBER.fullmatch(raw[0]) or not 1 <= int(raw[0]) <= self.max_page_size:
            raise ValidationError(
                {self.page_size_query_param: [f"A whole number from 1 to {self.max_page_size}."]}
            )
        return int(raw[0])

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": self.max_page_size,
                    "default": self.page_size,
                }
        return parameters

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        self._model = queryset.model
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise ValidationError({self.cursor_query_param: [INVALID_CURSOR]}) from None
        if cursor is None or cursor.position is None:
            return cursor
        field = self._model._meta.get_field(self.ordering[0].lstrip("-"))
        try:
            field.to_python(cursor.position)
        except DjangoValidationError:
            raise ValidationError({self.cursor_query_param: [INVALID_CURSOR]}) from None
        return cursor


class JobCursorPagination(CheckedCursorPagination):
    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class EventCursorPagination(CheckedCursorPagination):
    ordering = ("created_at", "id")
    page_size = 200
    page_size_query_param = "page_size"
    max_page_size = 1000
