from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request


class JobCursorPagination(CursorPagination):
    """DRF's cursor pagination, strict about its query: a page_size that is not a whole
    number from 1, or a cursor this API did not give out, is a 400 naming the parameter
    (DRF would quietly use the default size, or answer 404 for the cursor)."""

    ordering = ("-submitted_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param, "")
        if raw == "":
            return self.page_size
        try:
            size = int(raw)
        except ValueError:
            size = 0
        if size < 1:
            raise ValidationError(
                {
                    self.page_size_query_param: [
                        f"must be a whole number from 1 (at most {self.max_page_size} used)"
                    ]
                }
            )
        return min(size, self.max_page_size)

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            return super().decode_cursor(request)
        except NotFound:
            raise ValidationError(
                {self.cursor_query_param: ["not a cursor from this API's next or previous links"]}
            ) from None

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        params: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        for p in params:
            if p["name"] == self.page_size_query_param:
                p["schema"]["minimum"] = 1
                p["description"] = (
                    f"Results per page: {self.page_size} unless given;"
                    f" at most {self.max_page_size} are used."
                )
        return params
