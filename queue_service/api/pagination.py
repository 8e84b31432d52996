from __future__ import annotations

import base64
import binascii
from datetime import UTC
from typing import Any

from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request


class JobCursorPagination(CursorPagination):
    """DRF's cursor pagination, strict about its query: a page_size that is not a whole
    number from 1, or a cursor this API did not give out, is a 400 naming the parameter
    (DRF would quietly use the default size, answer 404 for the cursor, or filter by a
    forged position that is not a time: a 500)."""

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
        raw = request.query_params.get(self.cursor_query_param, "")
        try:
            # DRF's own decoding drops what is not base64 ("!!!" reads as the first page),
            # and a cursor it gives out is never empty.
            if raw and not base64.b64decode(raw.encode("ascii"), validate=True):
                raise NotFound
            cursor = super().decode_cursor(request)
            # The position is a submitted_at (the first ordering field), as the API wrote it.
            if cursor is not None and cursor.position is not None:
                when = parse_datetime(cursor.position)
                if when is None or when.tzinfo is None:
                    raise NotFound
                # In UTC, as the API writes it: PostgreSQL refuses an offset beyond ±15:59.
                cursor = cursor._replace(position=str(when.astimezone(UTC)))
        # ValueError: a date parse_datetime finds well-formed but that is none, or not ASCII;
        # OverflowError: a time that is out of range once in UTC (year 1 at +01:00).
        except (NotFound, ValueError, OverflowError, binascii.Error):
            raise ValidationError(
                {self.cursor_query_param: ["not a cursor from this API's next or previous links"]}
            ) from None
        return cursor

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
