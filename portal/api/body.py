"""Request bodies read strictly: an object or nothing, each field's type checked by the
service that uses it (DRF's fields would read ``5`` as ``"5"``, and schemathesis rightly
calls that accepting invalid data)."""

from __future__ import annotations

from typing import Any

from django.http import QueryDict
from rest_framework.request import Request

from portal.errors import ApplicationError


def request_object(request: Request) -> dict[str, Any]:
    """The body as an object (no body: an empty one); anything else (``null``, a list, a
    string) is a 400. The services check each field's type themselves, strictly."""
    body = request.data
    if isinstance(body, QueryDict):
        # A form body (one value per field, as a form means it); no body at all is an empty one.
        return body.dict()
    if not isinstance(body, dict):
        raise ApplicationError(
            "Expected a JSON object.", fields={"non_field_errors": ["Expected a JSON object."]}
        )
    return dict(body)
