"""Request guards that apply to every page and API endpoint."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse


class RejectNulBytesMiddleware:
    """Answer 400, naming the parameter, when a query parameter holds a NUL character.

    PostgreSQL text cannot hold NUL, so such a value reaching a filter was a 500 from the
    database (schemathesis found ``?team=%00``). Checking the query string once here covers
    every list, filter and page; request bodies are checked field by field by the job spec's
    validation (names, env, image…).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        query = request.META.get("QUERY_STRING", "")
        if "%00" in query or "\x00" in query:  # cheap test first: almost every request passes
            bad = sorted(n for n, values in request.GET.lists() if any("\x00" in v for v in values))
            if bad:
                return self._refuse(request, bad)
        return self.get_response(request)

    @staticmethod
    def _refuse(request: HttpRequest, names: list[str]) -> HttpResponse:
        message = "Query parameters may not contain NUL characters."
        if request.path.startswith("/api/"):
            fields = {name: [message] for name in names}
            return JsonResponse({"message": message, "extra": {"fields": fields}}, status=400)
        return HttpResponse(
            f"{message} ({', '.join(names)})", status=400, content_type="text/plain"
        )
