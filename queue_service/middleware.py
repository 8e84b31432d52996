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


class RejectNulBytes:
    """A NUL byte in the path, a query parameter or a form field is a 400 here, for every
    view. PostgreSQL text cannot hold NUL: a lookup, filter or insert given one fails with a
    DataError, a 500. (JSON bodies go through DRF's fields, whose CharField refuses NUL.)"""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        api = request.path.startswith("/api/")
        # Forms are the pages' only: the API takes JSON (a form there is a 415), and reading
        # request.POST would consume the body DRF parses.
        if "\x00" in request.path or _has_nul(request.GET) or (not api and _has_nul(request.POST)):
            message = "the path, a query parameter or a form field contains a NUL byte"
            if api:
                return JsonResponse({"detail": message}, status=400)
            return HttpResponseBadRequest(message, content_type="text/plain")
        return self.get_response(request)
