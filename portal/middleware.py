"""Request guards that apply to every page and API endpoint."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.http import HttpRequest, HttpResponse

from portal.errors import error_response, is_api_request

NUL = "\x00"
NUL_MESSAGE = "May not contain NUL characters."
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class RejectNulBytesMiddleware:
    """Answer 400, naming what held it, when the URL path, a query parameter, a header, a cookie
    or a page's form field holds a NUL character.

    PostgreSQL text cannot hold NUL, so such a value reaching a query was a 500 from the
    database: ``?team=%00`` (found by schemathesis), ``/api/v1/quotas/vision/a%00b/``, and a
    session cookie with a NUL, which the session store looks up on every page, ``/login/``
    included. Checking every way a string comes in, once, here covers every view; JSON and
    form bodies of the API are checked by its parsers (``portal.api.parsers``). A cookie that
    holds a NUL is deleted in the answer, so the browser is not stuck with it.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        fields = {place: [NUL_MESSAGE] for place in _nul_places(request)}
        if not fields:
            return self.get_response(request)
        response = error_response(request, 400, "The request contains a NUL character.", fields)
        for name in request.COOKIES:
            if NUL in name or NUL in request.COOKIES[name]:
                response.delete_cookie(name)
        return response


def _nul_places(request: HttpRequest) -> list[str]:
    """Names of the parts of ``request`` that hold a NUL: ``path``, query parameters by name,
    ``header <Name>``, ``cookie <name>``, form fields by name."""
    meta = request.META
    places: list[str] = []
    if NUL in request.path_info:
        places.append("path")
    query = meta.get("QUERY_STRING", "")
    if "%00" in query or NUL in query:  # cheap test first: almost every request passes
        places += sorted(_printable(n) for n, vs in request.GET.lists() if _holds_nul(n, vs))
    for key, value in meta.items():
        if key.startswith("HTTP_") and NUL in value:
            if key == "HTTP_COOKIE":
                places += sorted(
                    f"cookie {_printable(n)}"
                    for n, v in request.COOKIES.items()
                    if _holds_nul(n, [v])
                )
            else:
                places.append("header " + key[5:].replace("_", "-").title())
    if request.method == "POST" and not is_api_request(request) and _is_form(request):
        places += sorted(_printable(n) for n, vs in request.POST.lists() if _holds_nul(n, vs))
    return places


def _is_form(request: HttpRequest) -> bool:
    return request.META.get("CONTENT_TYPE", "").startswith(_FORM_TYPES)


def _holds_nul(name: str, values: Iterable[object]) -> bool:
    return NUL in name or any(isinstance(v, str) and NUL in v for v in values)


def _printable(name: str) -> str:
    """A parameter's name fit to show back: its NULs spelled ``\\x00``."""
    return name.replace(NUL, "\\x00")
