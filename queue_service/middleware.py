from __future__ import annotations

from collections.abc import Callable

from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
    QueryDict,
)


def _has_nul(data: QueryDict) -> bool:
    return any("\x00" in key or any("\x00" in v for v in values) for key, values in data.lists())


def _api_nul(request: HttpRequest) -> JsonResponse | None:
    """The API's 400 for a NUL: keyed by the query parameter that holds it, as a serializer
    names a field; where no parameter can be named, what holds it."""
    if "\x00" in request.path:
        return JsonResponse({"detail": "the path contains a NUL byte"}, status=400)
    if any("\x00" in key for key in request.GET):
        return JsonResponse({"detail": "a query parameter's name contains a NUL byte"}, status=400)
    named = {
        key: ["contains a NUL byte"]
        for key, values in request.GET.lists()
        if any("\x00" in v for v in values)
    }
    return JsonResponse(named, status=400) if named else None


class RejectNulBytes:
    """A NUL byte in the path, a query parameter or a form field is a 400 here, for every
    view. PostgreSQL text cannot hold NUL: a lookup, filter or insert given one fails with a
    DataError, a 500. (JSON bodies go through DRF's fields, whose CharField refuses NUL.)"""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # Forms are the pages' only: the API takes JSON (a form there is a 415), and reading
        # request.POST would consume the body DRF parses.
        if request.path.startswith("/api/"):
            refused = _api_nul(request)
            if refused is not None:
                return refused
        elif "\x00" in request.path or _has_nul(request.GET) or _has_nul(request.POST):
            return HttpResponseBadRequest(
                "the path, a query parameter or a form field contains a NUL byte",
                content_type="text/plain",
            )
        return self.get_response(request)
