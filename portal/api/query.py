"""Query parameters: one serializer per operation both documents them and checks them.

``@extend_schema(parameters=[SomeQuery])`` puts the serializer's fields into the OpenAPI schema
and :func:`query_params` validates a request with the same fields, so the two cannot drift.
Before, each view parsed its parameters by hand and leniently (``?tail=١`` read as 1,
``?requires_fp8=null`` as false), which schemathesis reports as accepted invalid data.
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request

_WHOLE_NUMBER = re.compile(r"-?[0-9]{1,18}")


class WholeNumberField(serializers.IntegerField):
    """An integer written in ASCII digits, nothing else (DRF's also takes ``1.0`` and ``١``)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, str) and not _WHOLE_NUMBER.fullmatch(data):
            self.fail("invalid")
        return super().to_internal_value(data)  # type: ignore[no-any-return]


class FlagField(serializers.BooleanField):
    """``true`` or ``false`` (also ``1``/``0``, as forms send them); anything else is a 400."""

    TRUE_VALUES = {"true", "True", "1", 1}
    FALSE_VALUES = {"false", "False", "0", 0}
    NULL_VALUES: set[Any] = set()


def query_params(
    serializer_class: type[serializers.Serializer], request: Request
) -> dict[str, Any]:
    """The request's query parameters that ``serializer_class`` declares, validated by it; a
    400 naming each bad one, and each one given more than once (only one value could count)."""
    query = request.query_params
    declared = serializer_class().fields
    repeated = {
        name: ["Give this parameter once."]
        for name, field in declared.items()
        if not isinstance(field, serializers.ListField) and len(query.getlist(name)) > 1
    }
    if repeated:
        raise ValidationError(repeated)
    data = {name: query[name] for name in declared if name in query}
    checked = serializer_class(data=data)
    checked.is_valid(raise_exception=True)
    return dict(checked.validated_data)
